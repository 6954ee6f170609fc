"""The service's own OAuth2 API (spec 4.2, 4.3, 4.4): envelopes, form-encoded token requests."""

from __future__ import annotations

from lbauth.core import authorize, tokens, users
from lbauth.errors import GrantTypeInvalid, ValidationFailed
from lbauth.handlers.base import BaseHandler, require


class AuthorizeExternalHandler(BaseHandler):
    """POST /api/oauth/authorize/external: a logged-in user (user token) authorizes an app."""

    async def post(self) -> None:
        s = self.services
        user = await users.user_for_token(s.db, s.clock, self.bearer_token())
        body = self.json_body()
        client_id, redirect_uri, scope = require(body, "clientId", "redirectUri", "scope")
        if not isinstance(client_id, str) or not isinstance(redirect_uri, str):
            raise ValidationFailed("clientId and redirectUri must be strings")
        app = await authorize.load_client(s.db, client_id, redirect_uri)
        request = authorize.check_api_request(app, redirect_uri, scope, body.get("state"), body.get("codeChallenge"),
                                              body.get("codeChallengeMethod"))
        code = await authorize.issue_code(s.db, s.clock, request, user.id, s.settings.code_ttl)
        self.send_data({"code": code, "state": request.state or ""})


class TokenHandler(BaseHandler):
    """Shared by the two token endpoints: form body, no credentials in the query, no caching."""

    grant_type: str

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_token_response_headers()  # errors too: write_error resets to these defaults

    def fields(self, *names: str) -> list[str]:
        self.refuse_credentials_in_query()
        form = self.form_body()
        (grant_type,) = require(form, "grant_type")
        if grant_type != self.grant_type:
            raise GrantTypeInvalid(f"grant_type must be {self.grant_type}")
        return require(form, *names) + [form.get("code_verifier") or None]


class TokenCodeHandler(TokenHandler):
    """POST /api/oauth/token/code: an authorization code for a token set."""

    grant_type = "authorization_code"

    async def post(self) -> None:
        s = self.services
        code, redirect_uri, client_id, client_secret, verifier = self.fields(
            "code", "redirect_uri", "client_id", "client_secret")
        self.limit_token_request(client_id)
        token_set = await tokens.exchange_code(s.db, s.clock, s.tokens, client_id=client_id,
                                               client_secret=client_secret, code=code, redirect_uri=redirect_uri,
                                               code_verifier=verifier)
        s.metrics.tokens_issued.labels("authorization_code").inc()
        self.send_data(token_set.envelope_data())


class TokenRefreshHandler(TokenHandler):
    """POST /api/oauth/token/refresh: a new access token; the refresh token comes back unchanged."""

    grant_type = "refresh_token"

    async def post(self) -> None:
        s = self.services
        refresh_token, client_id, client_secret, verifier = self.fields("refresh_token", "client_id", "client_secret")
        self.limit_token_request(client_id)
        if verifier is not None:
            raise ValidationFailed("code_verifier is not a refresh parameter")
        token_set = await tokens.refresh(s.db, s.clock, s.tokens, client_id=client_id, client_secret=client_secret,
                                         refresh_token=refresh_token)
        s.metrics.tokens_issued.labels("refresh_token").inc()
        self.send_data(token_set.envelope_data())

"""The service's own OAuth2 API (spec 4.2, 4.3, 4.4): envelopes, form-encoded token requests."""

from __future__ import annotations

from lbauth.core.fields import require
from lbauth.core.oauth.client_auth import ClientCredentials, ClientSecretPost
from lbauth.errors import GrantTypeInvalid, ValidationFailed
from lbauth.handlers.base import BaseHandler


class AuthorizeExternalHandler(BaseHandler):
    """POST /api/oauth/authorize/external: a logged-in user (user token) authorizes an app. The
    authorization endpoint's own chain; the request is the user's approval, so no page is needed.
    An OpenID request's ID token names the user token's session (contract 15: sid)."""

    async def post(self) -> None:
        s = self.services
        me = await s.accounts.sessions.check(self.bearer_token())
        body = self.json_body()
        client_id, redirect_uri, scope = require(body, "clientId", "redirectUri", "scope")
        if not isinstance(client_id, str) or not isinstance(redirect_uri, str):
            raise ValidationFailed("clientId and redirectUri must be strings")
        endpoint = s.oauth.authorization_endpoint
        request = await endpoint.api_request(client_id, redirect_uri, scope, state=body.get("state"),
                                             code_challenge=body.get("codeChallenge"),
                                             code_challenge_method=body.get("codeChallengeMethod"),
                                             resource=body.get("resource"), nonce=body.get("nonce"),
                                             address=self.request.remote_ip)
        issued = await endpoint.approve(request, me, self.source())
        self.send_data({"code": issued.code, "state": request.state or ""})


class TokenHandler(BaseHandler):
    """The specification's token endpoints (spec 4.3, 4.4): one grant each, client_secret_post only,
    every field required before anything else is looked at; the answer is an envelope."""

    grant_type: str
    fields: tuple[str, ...]  # the grant's parameters, in the order their absence is reported

    def set_default_headers(self) -> None:
        super().set_default_headers()
        self.set_token_response_headers()  # errors too: write_error resets to these defaults

    async def post(self) -> None:
        self.refuse_credentials_in_query()
        form = self.form_body()
        (grant_type,) = require(form, "grant_type")
        if grant_type != self.grant_type:
            raise GrantTypeInvalid(f"grant_type must be {self.grant_type}")
        client_id, client_secret = require(form, *self.fields, "client_id", "client_secret")[-2:]
        self.limit_token_request(client_id)
        params = self.grant_params(form)
        oauth = self.services.oauth
        token_set = await oauth.token(oauth.grant(self.grant_type),
                                      ClientCredentials(client_id, client_secret, ClientSecretPost.name), params)
        self.services.metrics.tokens_issued.labels(self.grant_type).inc()
        self.send_data(token_set.envelope_data())

    def grant_params(self, form: dict[str, str]) -> dict[str, str]:
        return {name: form[name] for name in self.fields}


class TokenCodeHandler(TokenHandler):
    """POST /api/oauth/token/code: an authorization code for a token set."""

    grant_type, fields = "authorization_code", ("code", "redirect_uri")

    def grant_params(self, form: dict[str, str]) -> dict[str, str]:
        return {**super().grant_params(form), "code_verifier": form.get("code_verifier", "")}


class TokenRefreshHandler(TokenHandler):
    """POST /api/oauth/token/refresh: a new access token; the refresh token comes back unchanged.
    No `scope` here (spec 4.4): the new token has the grant's scopes."""

    grant_type, fields = "refresh_token", ("refresh_token",)

    def grant_params(self, form: dict[str, str]) -> dict[str, str]:
        if form.get("code_verifier"):
            raise ValidationFailed("code_verifier is not a refresh parameter")
        return super().grant_params(form)

"""RFC 6749 endpoints for off-the-shelf clients (contract section 11): the same grants with the
RFC's request and response shapes, client_secret_basic or client_secret_post."""

from __future__ import annotations

import base64
import binascii
from urllib.parse import unquote

from sqlalchemy import Row

from lbauth import errors
from lbauth.core import revocation, scopes, tokens
from lbauth.errors import LbauthError, ValidationFailed
from lbauth.handlers.base import BaseHandler, require

# RFC 6749 5.2 error codes for our subCodes.
_RFC_ERROR = {
    "request.validation_failed": "invalid_request",
    "request.too_large": "invalid_request",
    "oauth2.grant_type.invalid": "unsupported_grant_type",
    "oauth2.client.secret_mismatch": "invalid_client",
    "oauth2.scope.invalid": "invalid_scope",
    "server.unavailable": "temporarily_unavailable",
}
_INVALID_GRANT = ("oauth2.code.", "oauth2.refresh_token.", "oauth2.redirect_uri.", "oauth2.code_verifier.")


def rfc_error(error: LbauthError) -> str:
    if error.sub_code.startswith(_INVALID_GRANT):
        return "invalid_grant"
    return _RFC_ERROR.get(error.sub_code, "server_error" if error.status >= 500 else "invalid_request")


class RfcHandler(BaseHandler):
    """Errors as RFC 6749 5.2 objects: {"error", "error_description"}."""

    def render_error(self, error: LbauthError) -> None:
        self.set_token_response_headers()
        if error.sub_code == "oauth2.client.secret_mismatch" and self.request.headers.get("Authorization"):
            self.set_header("WWW-Authenticate", 'Basic realm="lbauth"')
        self.send_json({"error": rfc_error(error), "error_description": error.message}, status=error.status)

    def client_credentials(self, form: dict[str, str]) -> tuple[str, str]:
        """client_secret_basic (RFC 6749 2.3.1: form-encoded id and secret) or client_secret_post."""
        header = self.request.headers.get("Authorization", "")
        if header:
            scheme, _, encoded = header.partition(" ")
            if scheme.lower() != "basic":
                raise errors.ClientSecretMismatch("Use HTTP Basic or client_secret_post to authenticate the client.")
            if "client_secret" in form:
                raise ValidationFailed("Use one client authentication method, not two (RFC 6749 2.3).")
            try:
                client_id, sep, secret = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                sep = ""
            if not sep:
                raise errors.ClientSecretMismatch("The Basic credentials are malformed.")
            client_id, secret = unquote(client_id.replace("+", " ")), unquote(secret.replace("+", " "))
            if "\x00" in client_id + secret:  # raw or %00: PostgreSQL text cannot hold it (a 500)
                raise errors.ClientSecretMismatch("The Basic credentials are malformed.")
            if form.get("client_id", client_id) != client_id:
                raise ValidationFailed("client_id in the body differs from the authenticated client.")
            return client_id, secret
        if not form.get("client_id") or not form.get("client_secret"):
            raise errors.ClientSecretMismatch("Client authentication is required: client_id and client_secret.")
        return form["client_id"], form["client_secret"]


class ClientAuthenticatedHandler(RfcHandler):
    """The RFC endpoints that authenticate the client like /oauth/token does."""

    def form(self, *required: str) -> list[str]:
        self.refuse_credentials_in_query()
        self.set_token_response_headers()
        self._form = self.form_body()
        return require(self._form, *required)

    async def client(self) -> Row:
        client_id, secret = self.client_credentials(self._form)
        self.limit_token_request(client_id)
        return await tokens.authenticate_client(self.services.db, client_id, secret)


class OAuthTokenHandler(ClientAuthenticatedHandler):
    """POST /oauth/token: authorization_code and refresh_token grants (RFC 6749 4.1.3, 6)."""

    async def post(self) -> None:
        s = self.services
        (grant_type,) = self.form("grant_type")
        if grant_type not in ("authorization_code", "refresh_token"):
            raise errors.GrantTypeInvalid("Supported grant types: authorization_code, refresh_token.")
        client_id, secret = self.client_credentials(self._form)
        self.limit_token_request(client_id)
        # Authenticated first, so a bad client hears invalid_client before any grant error (RFC 6749 5.2).
        await tokens.authenticate_client(s.db, client_id, secret)
        form = self._form
        if grant_type == "authorization_code":
            code, redirect_uri = require(form, "code", "redirect_uri")
            token_set = await tokens.exchange_code(s.db, s.clock, s.tokens, client_id=client_id, client_secret=secret,
                                                   code=code, redirect_uri=redirect_uri,
                                                   code_verifier=form.get("code_verifier") or None)
        else:
            (refresh_token,) = require(form, "refresh_token")
            scope = scopes.parse_space_separated(form["scope"]) if form.get("scope") else None
            token_set = await tokens.refresh(s.db, s.clock, s.tokens, client_id=client_id, client_secret=secret,
                                             refresh_token=refresh_token, scope=scope)
        s.metrics.tokens_issued.labels(grant_type).inc()
        self.send_json(token_set.rfc6749())



class OAuthRevokeHandler(ClientAuthenticatedHandler):
    """POST /oauth/revoke (RFC 7009): 200 whether or not the token was known (2.2)."""

    async def post(self) -> None:
        (token,) = self.form("token")
        app = await self.client()
        s = self.services
        await revocation.revoke_token(s.db, s.clock, s.checklist, s.keyring.public_keys, app=app, token=token,
                                      issuer=s.settings.issuer, audience=s.settings.audience,
                                      access_ttl=s.settings.access_token_ttl)
        self.clear_header("Content-Type")  # RFC 7009 2.2: the body is empty
        self.finish()


class OAuthIntrospectHandler(ClientAuthenticatedHandler):
    """POST /oauth/introspect (RFC 7662): is this token active, and what does it carry?"""

    async def post(self) -> None:
        (token,) = self.form("token")
        app = await self.client()
        s = self.services
        self.send_json(await revocation.introspect(s.db, s.clock, s.keyring.public_keys, app=app, token=token,
                                                   issuer=s.settings.issuer, audience=s.settings.audience))

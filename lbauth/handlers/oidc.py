"""OpenID Connect endpoints for relying parties (contract 15): UserInfo. Relying parties send no
XSRF token (contract 5); answers follow RFC 6750 and are open to browser clients (CORS)."""

from __future__ import annotations

from lbauth.core import scopes
from lbauth.core.oidc import claims
from lbauth.errors import BearerTokenError, LbauthError, ScopeInsufficient, TokenInvalid, TokenMissing, ValidationFailed
from lbauth.handlers.base import CorsHandler


class UserInfoEndpoint(CorsHandler):
    """GET and POST {base_url}/oauth/userinfo (OpenID Connect Core 5.3): plain JSON claims for an
    access token whose scope holds `openid`. The token comes in the Authorization header, or with
    POST as the `access_token` form field (RFC 6750 2.2); never in the query string (2.3)."""

    def render_error(self, error: LbauthError) -> None:
        """RFC 6750 3: the challenge says it all; the body repeats it as JSON for clients that read one."""
        if not isinstance(error, BearerTokenError):
            self.set_header("WWW-Authenticate", f'Bearer error="{error.rfc_error}"')
        self.send_json({"error": error.rfc_error, "error_description": error.message}, status=error.status)

    async def get(self) -> None:
        await self.answer(*self.header_token())

    async def post(self) -> None:
        form = self.form_body()
        in_body = form.get("access_token")
        if in_body and self.request.headers.get("Authorization"):
            raise ValidationFailed("Send the access token once: in the Authorization header or the body.")
        await self.answer(*((in_body, "bearer") if in_body else self.header_token()))

    def header_token(self) -> tuple[str, str]:
        """The Authorization header's token, as `Bearer` or `DPoP` (RFC 9449 7.1), and its scheme."""
        if "access_token" in self.request.query_arguments:
            raise ValidationFailed("The access token must not be sent in the query string (RFC 6750 2.3).")
        scheme, token = self.authorization()
        return token, scheme

    async def answer(self, token: str, scheme: str) -> None:
        if not token:
            raise TokenMissing()
        await self.services.require_fresh_checklist()
        token_claims = await self.checked_access_token(token, scheme)
        granted = token_claims.get("scope", "").split()
        if scopes.OPENID not in granted:
            raise ScopeInsufficient("UserInfo needs an access token with the openid scope.")
        user = await self.services.accounts.user(token_claims["sub"])
        if user is None:
            raise TokenInvalid()
        self.send_json(claims.userinfo(user, token_claims["asu"], granted))

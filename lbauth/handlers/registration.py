"""Dynamic client registration (RFC 7591) and its management endpoint (RFC 7592 read and delete),
contract 17. Errors are RFC 7591 3.2.2 objects; a missing or wrong token is RFC 6750's 401
`invalid_token`. Browser clients of any origin may call them (CORS), as they may the token endpoint."""

from __future__ import annotations

from typing import Any

from lbauth.errors import BearerTokenError, ClientMetadataInvalid, NotFound, TokenInvalid, ValidationFailed
from lbauth.handlers.base import CorsHandler
from lbauth.handlers.oauth_rfc import RfcHandler


class RegistrationBase(CorsHandler, RfcHandler):
    def limit(self) -> None:
        """Per source address, like sign-in: each registration makes an app (429 with Retry-After)."""
        self.services.rate_limits.hit("register-address", self.request.remote_ip or "")

    def presented_token(self, what: str) -> str:
        try:
            return self.bearer_token()
        except BearerTokenError:
            raise TokenInvalid(f"{what} is required: Authorization: Bearer <token>.") from None


class RegisterHandler(RegistrationBase):
    """POST {base_url}/oauth/register (RFC 7591 3.1): LBAUTH_REGISTRATION open, token (an initial
    access token as a bearer token) or off (404: not found, not advertised)."""

    def prepare(self) -> None:
        super().prepare()
        if self.services.settings.registration == "off":
            raise NotFound()

    async def post(self) -> None:
        self.limit()
        registration = self.services.registration
        if self.services.settings.registration == "token":
            await registration.check_initial_token(self.presented_token("An initial access token"))
        information = await registration.register(registration.parse(self.metadata_document()), self.source())
        self.set_token_response_headers()  # RFC 7591 3.2.1: it holds secrets
        self.send_json(information, status=201)

    def metadata_document(self) -> Any:
        """The body as JSON; anything else is invalid_client_metadata (RFC 7591 3.2.2)."""
        try:
            return self.json_body()
        except ValidationFailed as error:
            raise ClientMetadataInvalid(error.message) from None


class ClientConfigurationHandler(RegistrationBase):
    """GET and DELETE {base_url}/oauth/register/{client_id} (RFC 7592 2.1, 2.3) with the registration
    access token. They answer whatever LBAUTH_REGISTRATION says: a client registered before it was
    turned off may still read and delete its registration. PUT (2.2) is not supported: 405."""

    async def get(self, client_id: str) -> None:
        self.limit()
        token = self.presented_token("The registration access token")
        self.set_token_response_headers()
        self.send_json(await self.services.registration.read(client_id, token))

    async def delete(self, client_id: str) -> None:
        self.limit()
        token = self.presented_token("The registration access token")
        await self.services.registration.delete(client_id, token)
        self.set_status(204)
        self.finish()

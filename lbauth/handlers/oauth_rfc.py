"""RFC 6749 endpoints for off-the-shelf clients (contract section 11): the same grants with the
RFC's request and response shapes, client_secret_basic or client_secret_post. The token and
revocation endpoints answer browser clients of any origin (CORS); introspection is for servers."""

from __future__ import annotations

from lbauth.core.fields import require
from lbauth.core.oauth.client_auth import ClientCredentials
from lbauth.core.oauth.dpop import ProvenKey
from lbauth.errors import ClientSecretMismatch, DPoPProofRefused, LbauthError
from lbauth.handlers.base import BaseHandler, CorsHandler
from lbauth.metrics import DEVICE_CODE_GRANT


class RfcHandler(BaseHandler):
    """Errors as RFC 6749 5.2 objects: {"error", "error_description"}."""

    def render_error(self, error: LbauthError) -> None:
        self.set_token_response_headers()
        if isinstance(error, ClientSecretMismatch) and self.request.headers.get("Authorization"):
            self.set_header("WWW-Authenticate", 'Basic realm="lbauth"')  # RFC 6749 5.2 invalid_client
        self.send_json({"error": error.rfc_error, "error_description": error.message}, status=error.status)


class ClientAuthenticatedHandler(RfcHandler):
    """The RFC endpoints that authenticate the client: a form body, no credentials in the query."""

    list_fields: tuple[str, ...] = ()  # parameters that may repeat, passed on as lists

    def form(self, *required: str) -> list[str]:
        self.refuse_credentials_in_query()
        self.set_token_response_headers()
        self._form = self.form_body(self.list_fields)
        return require(self._form, *required)

    def dpop_proof(self) -> ProvenKey | None:
        """The key the request's DPoP proof shows (RFC 9449 4.3), checked against this endpoint's
        public URL, or None when it sent none; the proof's single use is recorded by the caller."""
        return self.services.oauth.dpop.at_token_endpoint(
            self.request.headers.get_list("DPoP"), self.services.settings.base_url + self.request.path)

    def client(self) -> ClientCredentials:
        """The credentials presented (RFC 6749 2.3), rate-limited per client before any check."""
        client = self.services.oauth.client_credentials(self.request.headers.get("Authorization", ""), self._form)
        self.limit_token_request(client.client_id)
        return client


class OAuthTokenHandler(CorsHandler, ClientAuthenticatedHandler):
    """POST /oauth/token: authorization_code, refresh_token and device_code grants (RFC 6749 4.1.3,
    6; RFC 8628 3.4)."""

    list_fields = ("resource",)  # RFC 8707 2

    async def post(self) -> None:
        (grant_type,) = self.form("grant_type")
        oauth = self.services.oauth
        grant = oauth.grant(grant_type)
        proof = self.dpop_proof()
        token_set = await oauth.token(grant, self.client(), self._form, proof)
        self.services.metrics.tokens_issued.labels(grant_type).inc()
        if grant_type == DEVICE_CODE_GRANT:
            self.services.metrics.device_grants.labels("tokens_issued").inc()
        self.send_json(token_set.rfc6749())


class OAuthParHandler(CorsHandler, ClientAuthenticatedHandler):
    """POST /oauth/par (RFC 9126 2): a client pushes its authorization request, authenticated as
    at the token endpoint, and gets 201 with the `request_uri` that stands for it at /oauth/ for
    60 seconds. Errors are RFC 6749 JSON errors, never redirects (2.3)."""

    list_fields = ("resource",)  # RFC 8707 2
    _CREDENTIALS = ("client_secret",)  # never kept with the request

    async def post(self) -> None:
        self.form()
        oauth = self.services.oauth
        app = await oauth.authenticate(self.client())
        params = {name: value if isinstance(value, list) else [value]
                  for name, value in self._form.items() if name not in self._CREDENTIALS}
        # RFC 9449 10.1: a DPoP proof here binds the code, as `dpop_jkt` would (and must agree with it).
        proof = self.dpop_proof()
        if proof is not None:
            if params.setdefault("dpop_jkt", [proof.jkt]) != [proof.jkt]:
                raise DPoPProofRefused("dpop_jkt is not the thumbprint of the DPoP proof's key.")
            await oauth.dpop.spend(proof)
        pushed = await oauth.authorization_endpoint.push(app, params)
        self.send_json({"request_uri": pushed.request_uri, "expires_in": pushed.expires_in}, status=201)


class OAuthDeviceAuthorizationHandler(CorsHandler, ClientAuthenticatedHandler):
    """POST /oauth/device_authorization (RFC 8628 3.1): a client registered for the device grant,
    authenticated as at the token endpoint, gets a device code to poll with and a user code for
    its user to enter at {auth_url}/device (3.2); errors are RFC 6749 JSON errors."""

    list_fields = ("resource",)  # RFC 8707 2

    async def post(self) -> None:
        self.form()
        oauth = self.services.oauth
        app = await oauth.authenticate(self.client())
        started = await oauth.device.start(app, self._form.get("scope"), self._form.get("resource", []))
        self.services.metrics.device_grants.labels("started").inc()
        self.send_json(started.rfc8628())


class OAuthRevokeHandler(CorsHandler, ClientAuthenticatedHandler):
    """POST /oauth/revoke (RFC 7009): 200 whether or not the token was known (2.2), with the body
    `{}` as JSON (contract 7): clients that parse every answer as JSON (simple-oauth2) need one."""

    async def post(self) -> None:
        (token,) = self.form("token")
        await self.services.oauth.revoke(self.client(), token)
        self.send_json({})


class OAuthIntrospectHandler(ClientAuthenticatedHandler):
    """POST /oauth/introspect (RFC 7662): is this token active, and what does it carry?"""

    async def post(self) -> None:
        (token,) = self.form("token")
        self.send_json(await self.services.oauth.introspect(self.client(), token))

"""Tornado helpers for resource services (contract sections 9 and 17). Duck-typed: this module does
not import Tornado; it uses only `request.headers`, `request.method`, `request.full_url()`,
`set_status`, `set_header` and `finish`.

- `@requires_token(verifier, *scopes, acr_values=(), max_age=None, resource_metadata=None)` protects a
  handler method (`acr_values` and `max_age`: RFC 9470 step-up), for Bearer and DPoP (RFC 9449) tokens;
- `ResourceMetadataMixin` and `resource_metadata_route` serve the RFC 9728 protected-resource
  metadata document at `/.well-known/oauth-protected-resource` plus the resource's path.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from lbauth.verify.claims import TokenError, invalid_token, step_up_requirements
from lbauth.verify.dpop import DPoPError, DPoPRefusal, DPoPRequest
from lbauth.verify.resources import metadata_url, resource_metadata
from lbauth.verify.verifier import Verifier


def bearer_token(authorization: str) -> str:
    """The token of an RFC 6750 2.1 `Authorization: Bearer` header; TokenError if absent or malformed."""
    if not authorization:
        raise TokenError("oauth2.token.missing", 401, "An access token is required.")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise invalid_token()
    return token.strip()


def presented_token(request: Any) -> tuple[str, DPoPRequest | None]:
    """The access token of a request, and with `Authorization: DPoP` (RFC 9449 7.1; the scheme in any
    case) the request its proof must match: method, URL and the one `DPoP` header (4.3 point 1).
    Otherwise the token of `Authorization: Bearer` (RFC 6750 2.1). TokenError if there is none."""
    authorization = request.headers.get("Authorization", "")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "dpop":
        return bearer_token(authorization), None
    if not token.strip():
        raise DPoPRefusal.of(invalid_token())
    get_list = getattr(request.headers, "get_list", None)
    proofs = get_list("DPoP") if get_list else [value for value in [request.headers.get("DPoP")] if value]
    if len(proofs) != 1:
        raise DPoPError("A request with Authorization: DPoP needs exactly one DPoP header, with the proof.")
    return token.strip(), DPoPRequest(request.method, request.full_url(), proofs[0])


def refuse(handler: Any, error: TokenError, scopes: Iterable[str] = (), resource_metadata: str | None = None) -> None:
    """Answer with the lbauth error envelope and, for 401/403, the RFC 6750 3 challenge (naming the
    RFC 9728 metadata and the scopes needed when `resource_metadata` is given), in the `DPoP` scheme
    for a DPoPRefusal (RFC 9449 7.1)."""
    handler.set_status(error.status)
    if error.status in (401, 403):
        handler.set_header("WWW-Authenticate", error.challenge_for(scopes, resource_metadata))
    elif error.status == 503:
        handler.set_header("Retry-After", "5")
    handler.finish({"code": error.status, "message": error.message, "subCode": error.sub_code})


def requires_token(verifier: Verifier, *scopes: str, acr_values: Iterable[str] | str = (), max_age: int | None = None,
                   resource_metadata: str | None = None) -> Callable:
    """Protect a Tornado RequestHandler method: `@requires_token(verifier, "chat.read")`; the
    claims (an `AccessTokenClaims`) are then `self.token_claims`. With `resource_metadata` (the URL
    of the resource's RFC 9728 document), a 401 or 403 tells the client where to find it and which
    scopes to ask for (contract 17: MCP clients discover the authorization server and step up on them).

    Step-up (RFC 9470): with `acr_values` (the ACR values accepted, in order of preference) or
    `max_age` (seconds since the user's last sign-in), a token whose `acr` or `auth_time` falls
    short gets 401 `WWW-Authenticate: Bearer error="insufficient_user_authentication",
    error_description="...", acr_values="...", max_age=N` (RFC 9470 3), plus `resource_metadata`
    when given; the client then authorizes again asking for them (RFC 9470 4). Both are checked
    here, once: ValueError for ACR values with spaces or quotes, or a max_age that is not a
    non-negative integer.

    DPoP (RFC 9449 7): `Authorization: DPoP <token>` with one `DPoP` header is checked by
    `verifier.verify(..., dpop=DPoPRequest(method, request.full_url(), proof))`; its refusals are
    challenged `DPoP error="...", algs="ES256 EdDSA RS256"` (with `error="invalid_dpop_proof"` for a
    bad proof), and a bound token sent as Bearer is refused. Behind a proxy, have Tornado see the
    public scheme and host (`xheaders=True`): the proof names the URL the client used."""
    acr_values, max_age = step_up_requirements(acr_values, max_age)
    step_up: dict[str, Any] = {}
    if acr_values or max_age is not None:  # only then: a verifier of an older signature keeps working
        step_up = {"acr_values": acr_values, "max_age": max_age}

    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapper(handler: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                token, dpop = presented_token(handler.request)
                if dpop is None:  # as before: a Bearer request
                    handler.token_claims = verifier.verify(token, scopes, **step_up)
                else:
                    handler.token_claims = verifier.verify(token, scopes, **step_up, dpop=dpop)
            except TokenError as exc:
                refuse(handler, exc, scopes, resource_metadata)
                return None
            return method(handler, *args, **kwargs)
        return wrapper
    return decorate


class ResourceMetadataMixin:
    """GET: the RFC 9728 2 document given as `document` to `initialize`. Mix it into Tornado's
    RequestHandler (`resource_metadata_route` does): this package does not import Tornado."""

    document: dict[str, Any]

    def initialize(self, document: dict[str, Any]) -> None:
        self.document = document

    def get(self) -> None:
        handler: Any = self
        handler.set_header("Access-Control-Allow-Origin", "*")  # browser-based clients read it too
        handler.set_header("Cache-Control", "public, max-age=3600")
        handler.finish(self.document)


def resource_metadata_route(resource: str, issuer: str, scopes: Iterable[str] = (), *,
                            handler_base: type) -> tuple[str, type, dict[str, Any]]:
    """A Tornado URL rule serving `resource_metadata(resource, issuer, scopes)` at its RFC 9728 3.1
    location on the resource's host: `(pattern, handler class, kwargs)` for
    `tornado.web.Application([...])`. `handler_base` is `tornado.web.RequestHandler` (or a subclass
    of it), passed in so that this package need not import Tornado."""
    handler = type("ResourceMetadataHandler", (ResourceMetadataMixin, handler_base), {})
    path = urlsplit(metadata_url(resource)).path
    return re.escape(path), handler, {"document": resource_metadata(resource, issuer, scopes)}

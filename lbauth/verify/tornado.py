"""`@requires_token` for Tornado handlers (contract section 9). Duck-typed: this module does not
import Tornado; it uses only `request.headers`, `set_status`, `set_header` and `finish`."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lbauth.verify.claims import TokenError, invalid_token
from lbauth.verify.verifier import Verifier


def bearer_token(authorization: str) -> str:
    """The token of an RFC 6750 2.1 `Authorization: Bearer` header; TokenError if absent or malformed."""
    if not authorization:
        raise TokenError("oauth2.token.missing", 401, "An access token is required.")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise invalid_token()
    return token.strip()


def refuse(handler: Any, error: TokenError) -> None:
    """Answer with the lbauth error envelope and, for 401/403, the RFC 6750 3 challenge."""
    handler.set_status(error.status)
    if error.status in (401, 403):
        handler.set_header("WWW-Authenticate", error.challenge)
    elif error.status == 503:
        handler.set_header("Retry-After", "5")
    handler.finish({"code": error.status, "message": error.message, "subCode": error.sub_code})


def requires_token(verifier: Verifier, *scopes: str) -> Callable:
    """Protect a Tornado RequestHandler method: `@requires_token(verifier, "chat.read")`; the
    claims are then `self.token_claims`."""
    def decorate(method: Callable) -> Callable:
        @functools.wraps(method)
        def wrapper(handler: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                token = bearer_token(handler.request.headers.get("Authorization", ""))
                handler.token_claims = verifier.verify(token, scopes)
            except TokenError as exc:
                refuse(handler, exc)
                return None
            return method(handler, *args, **kwargs)
        return wrapper
    return decorate

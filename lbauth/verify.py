"""Offline verification of lbauth access tokens (contract sections 6 and 9).

An access token is `lba_at_` + a compact JWS in the RFC 9068 profile. This module imports only
the standard library, PyJWT and cryptography, so a resource service can use it without the
server's dependencies; the server verifies its own tokens with the same `decode_access_token`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from typing import Any

import jwt

PREFIX = "lba_at_"
ALLOWED_ALGS = frozenset({"ES256", "RS256", "EdDSA"})  # never "none", never HMAC
TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})  # RFC 9068 2.1
REQUIRED_CLAIMS = ("iss", "aud", "sub", "client_id", "scope", "iat", "exp", "jti")
MAX_LEEWAY = 60


class TokenError(Exception):
    """Why a token is refused: `sub_code` and `status` as in the contract's section 3."""

    def __init__(self, sub_code: str, status: int, message: str) -> None:
        super().__init__(message)
        self.sub_code = sub_code
        self.status = status
        self.message = message


def _invalid(message: str = "The access token is invalid.") -> TokenError:
    return TokenError("oauth2.token.invalid", 401, message)


def _b64json(segment: str) -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    except (ValueError, TypeError):
        raise _invalid() from None


def decode_access_token(token: str, keys: Mapping[str, tuple[str, Any]], *, issuer: str, audience: str,
                        now: float, leeway: int = 30) -> dict[str, Any]:
    """The verified claims of `token`, or TokenError. `keys` maps kid -> (alg, public key object);
    the header's `kid` picks the key and must agree with its `alg` (RFC 8725 3.1)."""
    if not isinstance(token, str) or not token.startswith(PREFIX):
        raise _invalid()
    jws = token[len(PREFIX):]  # stripped exactly once: "lba_at_lba_at_..." stays invalid
    parts = jws.split(".")
    if len(parts) != 3:
        raise _invalid()
    header = _b64json(parts[0])
    if not isinstance(header, dict):
        raise _invalid()
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALLOWED_ALGS or not isinstance(kid, str) or kid not in keys:
        raise _invalid()
    key_alg, key = keys[kid]
    if key_alg != alg or str(header.get("typ", "")).lower() not in TOKEN_TYPES:
        raise _invalid()
    try:
        claims = jwt.decode(jws, key, algorithms=[alg], audience=audience, issuer=issuer,
                            options={"require": list(REQUIRED_CLAIMS), "verify_exp": False, "verify_iat": False,
                                     "verify_nbf": False})
    except jwt.InvalidTokenError:
        raise _invalid() from None
    leeway = min(max(leeway, 0), MAX_LEEWAY)
    exp, iat = claims["exp"], claims["iat"]
    if not isinstance(exp, int | float) or not isinstance(iat, int | float) or isinstance(exp, bool):
        raise _invalid()
    if iat > now + leeway:
        raise _invalid("The access token was issued in the future.")
    if exp <= now - leeway:
        raise TokenError("oauth2.token.expired", 401, "The access token has expired.")
    if not isinstance(claims["scope"], str) or not isinstance(claims["jti"], str):
        raise _invalid()
    return claims


def require_scopes(claims: Mapping[str, Any], required: Iterable[str]) -> None:
    """TokenError `oauth2.scope.insufficient` (403) unless every required scope was granted."""
    granted = set(claims.get("scope", "").split())
    if not set(required) <= granted:
        raise TokenError("oauth2.scope.insufficient", 403,
                         "The access token does not carry the scope this resource needs.")

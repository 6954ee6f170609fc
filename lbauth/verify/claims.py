"""The access-token check (contract section 6, RFC 9068): `lba_at_` + a compact JWS, its signature,
header and claims. Pure: no I/O, no clock of its own. The server checks its own tokens with it too."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any

from jwt.algorithms import get_default_algorithms

from lbauth.verify.resources import audience_matches

PREFIX = "lba_at_"
ALLOWED_ALGS = frozenset({"ES256", "RS256", "EdDSA"})  # never "none", never HMAC (RFC 8725 3.1)
TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})  # RFC 9068 2.1
REQUIRED_CLAIMS = ("iss", "aud", "sub", "client_id", "scope", "iat", "exp", "jti")
MAX_LEEWAY = 60
_ALGORITHMS = {name: alg for name, alg in get_default_algorithms().items() if name in ALLOWED_ALGS}


class TokenError(Exception):
    """Why a token is refused: `sub_code` and `status` as in the contract's section 3."""

    def __init__(self, sub_code: str, status: int, message: str) -> None:
        super().__init__(message)
        self.sub_code = sub_code
        self.status = status
        self.message = message

    @property
    def challenge(self) -> str:
        """The RFC 6750 3 WWW-Authenticate value for this refusal."""
        if self.sub_code == "oauth2.token.missing":
            return "Bearer"
        if self.sub_code == "oauth2.scope.insufficient":
            return 'Bearer error="insufficient_scope"'
        return 'Bearer error="invalid_token"'

    def challenge_for(self, scopes: Iterable[str] = (), resource_metadata: str | None = None) -> str:
        """The challenge of a resource service that publishes RFC 9728 metadata (contract 17): a
        401 names the metadata URL and the handler's scopes (with `error="invalid_token"` when a
        token was sent), a 403 `insufficient_scope` with the scopes it needs, so that a client can
        discover the authorization server and step up (RFC 9728 5.1, RFC 6750 3)."""
        if resource_metadata is None:
            return self.challenge
        scope = " ".join([scopes] if isinstance(scopes, str) else scopes)
        metadata = f'resource_metadata="{_quoted(resource_metadata)}"'
        scope_param = f'scope="{_quoted(scope)}"' if scope else ""
        if self.sub_code == "oauth2.scope.insufficient":
            return "Bearer " + ", ".join(p for p in ('error="insufficient_scope"', scope_param, metadata) if p)
        error = "" if self.sub_code == "oauth2.token.missing" else 'error="invalid_token"'
        return "Bearer " + ", ".join(p for p in (error, metadata, scope_param) if p)


def _quoted(value: str) -> str:
    """An RFC 9110 quoted-string's content."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def invalid_token(message: str = "The access token is invalid.") -> TokenError:
    """The refusal of a token that is not a valid lbauth access token (401 `oauth2.token.invalid`)."""
    return TokenError("oauth2.token.invalid", 401, message)


def _segment(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (ValueError, binascii.Error):
        raise invalid_token() from None


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise invalid_token() from None
    if not isinstance(value, dict):
        raise invalid_token()
    return value


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def unverified_kid(token: Any) -> str | None:
    """The `kid` a token's header names, unverified: only to decide whether to fetch the JWKS again."""
    try:
        header = json.loads(_segment(token[len(PREFIX):].split(".", 1)[0]))
    except (TokenError, ValueError, TypeError, AttributeError):
        return None
    kid = header.get("kid") if isinstance(header, dict) else None
    return kid if isinstance(kid, str) else None


def decode_access_token(token: str, keys: Mapping[str, tuple[str, Any]], *, issuer: str, audience: str | None,
                        now: float, leeway: int = 30) -> dict[str, Any]:
    """The verified claims of `token`, or TokenError. `keys` maps kid -> (alg, public key object);
    the header's `kid` picks the key and must agree with its `alg`. The signature is checked
    before any claim is trusted. `audience` must be among the token's `aud` (a string or a list,
    RFC 7519 4.1.3), compared as RFC 3986 6.2.2 normalises URIs (contract 17); None accepts any
    audience (the server's RFC 7009 and RFC 7662 endpoints, for its own tokens of every resource)."""
    if not isinstance(token, str) or not token.startswith(PREFIX):
        if isinstance(token, str) and token.startswith("lba_ut_"):
            raise invalid_token("This is a user token (from signing in); this endpoint takes an access token "
                                "(lba_at_...) from the token endpoint.")
        raise invalid_token("The access token is invalid: an lbauth access token starts with lba_at_.")
    jws = token[len(PREFIX):]  # stripped exactly once: "lba_at_lba_at_..." stays invalid
    parts = jws.split(".")
    if len(parts) != 3:
        raise invalid_token()
    header = _json_object(_segment(parts[0]))
    alg, kid = header.get("alg"), header.get("kid")
    if alg not in ALLOWED_ALGS or not isinstance(kid, str) or kid not in keys:
        raise invalid_token("The access token is invalid: it is not signed by a key of this issuer.")
    key_alg, key = keys[kid]
    if key_alg != alg or str(header.get("typ", "")).lower() not in TOKEN_TYPES or "crit" in header:
        raise invalid_token()
    signing_input = f"{parts[0]}.{parts[1]}".encode("ascii", "replace")
    if not _ALGORITHMS[alg].verify(signing_input, key, _segment(parts[2])):
        raise invalid_token("The access token is invalid: its signature does not verify.")
    claims = _json_object(_segment(parts[1]))
    if any(name not in claims for name in REQUIRED_CLAIMS):
        raise invalid_token()
    aud = claims["aud"]
    if claims["iss"] != issuer:
        raise invalid_token("The access token is invalid: it was issued by another issuer.")
    if audience is not None and aud != audience and not audience_matches(aud, audience):
        raise invalid_token(f"The access token is for another audience: {audience} is not among its aud.")
    exp, iat = claims["exp"], claims["iat"]
    if not _number(exp) or not _number(iat) or not all(isinstance(claims[c], str) for c in
                                                        ("sub", "client_id", "scope", "jti")):
        raise invalid_token()
    check_times(claims, now, leeway)
    return claims


def check_times(claims: Mapping[str, Any], now: float, leeway: float = 0) -> None:
    """TokenError unless `now` lies between the token's `iat` and `exp` (RFC 7519 4.1.4, 4.1.6),
    give or take `leeway` seconds (at most MAX_LEEWAY)."""
    leeway = min(max(leeway, 0), MAX_LEEWAY)
    if claims["iat"] > now + leeway:
        raise invalid_token("The access token was issued in the future.")
    if claims["exp"] <= now - leeway:
        raise TokenError("oauth2.token.expired", 401, "The access token has expired.")


def require_scopes(claims: Mapping[str, Any], required: Iterable[str]) -> None:
    """TokenError `oauth2.scope.insufficient` (403) unless every required scope was granted."""
    if isinstance(required, str):  # one scope, not its letters
        required = [required]
    granted = set(claims.get("scope", "").split())
    if not set(required) <= granted:
        raise TokenError("oauth2.scope.insufficient", 403,
                         "The access token does not carry the scope this resource needs.")

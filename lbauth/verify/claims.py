"""The access-token check (contract section 6, RFC 9068): `lba_at_` + a compact JWS, its signature,
header and claims; and what a resource asks of the sign-in behind it (RFC 9470). Pure: no I/O, no
clock of its own. The server checks its own tokens with it too."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Mapping
from typing import Any, TypeGuard

from jwt.algorithms import get_default_algorithms

from lbauth.verify.resources import audience_matches

PREFIX = "lba_at_"
ALLOWED_ALGS = frozenset({"ES256", "RS256", "EdDSA"})  # never "none", never HMAC (RFC 8725 3.1)
TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})  # RFC 9068 2.1
REQUIRED_CLAIMS = ("iss", "aud", "sub", "client_id", "scope", "iat", "exp", "jti")
MAX_LEEWAY = 60
# RFC 9470 3: the token is good, but the user's sign-in behind it is too weak or too old for this resource.
INSUFFICIENT_USER_AUTHENTICATION = "oauth2.token.insufficient_user_authentication"
_ALGORITHMS = {name: alg for name, alg in get_default_algorithms().items() if name in ALLOWED_ALGS}


class TokenError(Exception):
    """Why a token is refused: `sub_code` and `status` as in the contract's section 3. A refusal of
    the sign-in behind a good token (`oauth2.token.insufficient_user_authentication`, 401) also
    carries what the resource asked for, `acr_values` and `max_age`, for its RFC 9470 3 challenge."""

    def __init__(self, sub_code: str, status: int, message: str, *, acr_values: Iterable[str] = (),
                 max_age: int | None = None) -> None:
        super().__init__(message)
        self.sub_code = sub_code
        self.status = status
        self.message = message
        self.acr_values = tuple(acr_values)
        self.max_age = max_age

    @property
    def challenge(self) -> str:
        """The RFC 6750 3 WWW-Authenticate value for this refusal (RFC 9470 3 for a sign-in that
        falls short)."""
        if self.sub_code == "oauth2.token.missing":
            return "Bearer"
        if self.sub_code == "oauth2.scope.insufficient":
            return 'Bearer error="insufficient_scope"'
        if self.sub_code == INSUFFICIENT_USER_AUTHENTICATION:
            return "Bearer " + ", ".join(self._step_up_params())
        return 'Bearer error="invalid_token"'

    def _step_up_params(self) -> list[str]:
        """RFC 9470 3: the error, its description, then `acr_values` (space-separated, in order of
        preference, quoted) and `max_age` (a non-negative integer, sent as a bare token) when asked for."""
        params = ['error="insufficient_user_authentication"', f'error_description="{_quoted(self.message)}"']
        if self.acr_values:
            params.append(f'acr_values="{_quoted(" ".join(self.acr_values))}"')
        if self.max_age is not None:
            params.append(f"max_age={int(self.max_age)}")
        return params

    def challenge_for(self, scopes: Iterable[str] = (), resource_metadata: str | None = None) -> str:
        """The challenge of a resource service that publishes RFC 9728 metadata (contract 17): a
        401 names the metadata URL and the handler's scopes (with `error="invalid_token"` when a
        token was sent), a 403 `insufficient_scope` with the scopes it needs, so that a client can
        discover the authorization server and step up (RFC 9728 5.1, RFC 6750 3). A sign-in that
        falls short gets the RFC 9470 3 challenge plus the metadata URL, and no `scope`: RFC 9470 3
        adds one when scopes are lacking too, and they were not (that is answered 403 first)."""
        if resource_metadata is None:
            return self.challenge
        scope = " ".join([scopes] if isinstance(scopes, str) else scopes)
        metadata = f'resource_metadata="{_quoted(resource_metadata)}"'
        scope_param = f'scope="{_quoted(scope)}"' if scope else ""
        if self.sub_code == "oauth2.scope.insufficient":
            return "Bearer " + ", ".join(p for p in ('error="insufficient_scope"', scope_param, metadata) if p)
        if self.sub_code == INSUFFICIENT_USER_AUTHENTICATION:
            return "Bearer " + ", ".join([*self._step_up_params(), metadata])
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


def _number(value: Any) -> TypeGuard[int | float]:
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


def step_up_requirements(acr_values: Iterable[str] | str = (),
                         max_age: int | None = None) -> tuple[tuple[str, ...], int | None]:
    """`acr_values` and `max_age` as a resource asks for them (RFC 9470 3), checked: ValueError
    unless every ACR value is a non-empty string without whitespace, quotes or backslashes (a string
    is a space-separated list, as on the wire), and `max_age` is None or a non-negative integer."""
    values = tuple(acr_values.split() if isinstance(acr_values, str) else acr_values)
    for value in values:
        if (not isinstance(value, str) or not value or not value.isprintable()
                or any(c.isspace() or c in '"\\' for c in value)):
            raise ValueError(f"acr_values must be ACR values (strings without spaces or quotes), not {value!r}")
    if max_age is not None and (not isinstance(max_age, int) or isinstance(max_age, bool) or max_age < 0):
        raise ValueError(f"max_age must be a non-negative number of seconds, not {max_age!r}")
    return values, max_age


def require_authentication(claims: Mapping[str, Any], *, acr_values: Iterable[str] | str = (),
                           max_age: int | None = None, now: float) -> None:
    """TokenError `oauth2.token.insufficient_user_authentication` (401, RFC 9470 3) unless the user's
    sign-in behind the token meets the resource's requirements: its `acr` is one of `acr_values`
    (exact membership: RFC 9470 3 has the resource list the values it accepts; a token without
    `acr` meets none), and, with `max_age`, its `auth_time` is present and at most `max_age`
    seconds before `now` (RFC 9470 3 and 6.1; RFC 9068 2.2.1 puts both claims in the token).
    The error carries both requirements, for its challenge."""
    values, max_age = step_up_requirements(acr_values, max_age)
    if values and claims.get("acr") not in values:
        raise TokenError(INSUFFICIENT_USER_AUTHENTICATION, 401,
                         "This resource needs a stronger sign-in than the access token's.",
                         acr_values=values, max_age=max_age)
    if max_age is not None:
        auth_time = claims.get("auth_time")
        if not _number(auth_time) or now - auth_time > max_age:
            raise TokenError(INSUFFICIENT_USER_AUTHENTICATION, 401,
                             "This resource needs a more recent sign-in than the access token's.",
                             acr_values=values, max_age=max_age)


class AccessTokenClaims(dict[str, Any]):
    """The verified claims of an access token: a `dict` (index it as before, `claims["sub"]`) with
    read-only views of what RFC 9068 2.2 and 2.2.1 put in it. `acr`, `amr` and `auth_time` say how
    and when the user signed in (RFC 9470 6.1); they are None or empty when the token does not say."""

    __slots__ = ()

    @property
    def subject(self) -> str:
        """`sub`: the user's id."""
        return self["sub"]

    @property
    def scopes(self) -> tuple[str, ...]:
        """The granted scopes, from the space-separated `scope`."""
        scope = self.get("scope")
        return tuple(scope.split()) if isinstance(scope, str) else ()

    @property
    def acr(self) -> str | None:
        """The authentication context class reached at sign-in (`phr`, `urn:lbauth:acr:mfa`, ...)."""
        acr = self.get("acr")
        return acr if isinstance(acr, str) else None

    @property
    def amr(self) -> tuple[str, ...]:
        """The authentication methods used at sign-in (RFC 8176: `pwd`, `otp`, `hwk`, `mfa`, ...)."""
        amr = self.get("amr")
        if isinstance(amr, list) and all(isinstance(method, str) for method in amr):
            return tuple(amr)
        return ()

    @property
    def auth_time(self) -> int | None:
        """When the user last signed in actively, Unix seconds."""
        auth_time = self.get("auth_time")
        return int(auth_time) if _number(auth_time) else None

"""ID tokens (OpenID Connect Core 2 and 3.1.3.6; contract 15): signed with the app's algorithm,
`sub` the pairwise appScopedUserId, `at_hash` of the access token exactly as issued; added to an
OpenID grant's token set by `IdTokenExtension`, registered on the issuing step (core/oauth/issuing.py)."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import jwt

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core.acr import acr_of
from lbauth.core.crypto.keys import KeyRing
from lbauth.core.oauth.issuing import Issuance
from lbauth.core.oauth.tokens import TokenSet
from lbauth.core.scopes import OPENID
from lbauth.settings import Settings

ID_TOKEN_ALGS = ("RS256", "ES256", "EdDSA")  # RS256 first: the default, and OpenID Connect's (Core 15.1)
# OpenID Connect Core 3.1.3.6: the hash of the JWS algorithm; Ed25519 (EdDSA) signs with SHA-512.
_AT_HASH = {"RS256": hashlib.sha256, "ES256": hashlib.sha256, "EdDSA": hashlib.sha512}


def at_hash(access_token: str, alg: str) -> str:
    """The base64url left half of the access token's digest, `lba_at_` prefix included."""
    digest = _AT_HASH[alg](access_token.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest[: len(digest) // 2]).rstrip(b"=").decode()


def read_hint(id_token: str, public_keys: dict[str, tuple[str, Any]], issuer: str) -> dict[str, Any]:
    """An `id_token_hint` (OpenID Connect Core 3.1.2.1; contract 15): an ID token this server issued,
    its signature and `iss` checked, its expiry ignored. ValidationFailed (invalid_request) otherwise."""
    refused = errors.ValidationFailed("id_token_hint is not an ID token this server issued.")
    try:
        header = jwt.get_unverified_header(id_token)
        alg, key = public_keys[header["kid"]]
        if header.get("alg") != alg or alg not in ID_TOKEN_ALGS:
            raise refused
        claims = jwt.decode(id_token, key, algorithms=[alg], issuer=issuer,
                            options={"verify_exp": False, "verify_aud": False, "verify_iat": False,
                                     "require": ["iss", "sub", "aud"]})
    except (jwt.PyJWTError, KeyError, TypeError, ValueError):
        raise refused from None
    if not isinstance(claims.get("sub"), str) or not isinstance(claims.get("aud"), (str, list)):
        raise refused
    return claims


def hint_is_for(claims: dict[str, Any], client_id: str) -> bool:
    audience = claims["aud"]
    return audience == client_id or (isinstance(audience, list) and audience == [client_id])


class IdTokens:
    """Mints ID tokens with the process's key ring: one active key per algorithm (contract 8)."""

    def __init__(self, settings: Settings, clock: Clock, keyring: Callable[[], KeyRing],
                 activate_key: Callable[[str], Awaitable[None]]) -> None:
        self.settings, self.clock, self._keyring, self._activate_key = settings, clock, keyring, activate_key

    async def mint(self, *, alg: str, client_id: str, asu: str, auth_time: int, nonce: str | None,
                   session_id: str | None, access_token: str, now: int, amr: tuple[str, ...] = ("pwd",)) -> str:
        signer = self._keyring().signers.get(alg)
        if signer is None:  # the first ID token of an algorithm an app chose: its key is made (contract 8)
            await self._activate_key(alg)
            signer = self._keyring().signers.get(alg)
            if signer is None:
                raise errors.ServerUnavailable(f"No {alg} signing key is active.")
        claims: dict[str, Any] = {"iss": self.settings.issuer, "sub": asu, "aud": client_id, "iat": now,
                                  "exp": now + self.settings.id_token_ttl, "auth_time": auth_time,
                                  "at_hash": at_hash(access_token, alg), "amr": list(amr), "acr": acr_of(amr)}
        if nonce is not None:
            claims["nonce"] = nonce
        if session_id is not None:
            claims["sid"] = session_id
        return signer.sign(claims, typ="JWT")


class IdTokenExtension:
    """OpenID Connect as an extension of every grant (Core 3.1.3.3, 12.2): an OpenID grant's token
    set carries an ID token for the access token just minted; a refresh's has the same `sub` and
    `auth_time` as the first, and no nonce (the grants leave it out)."""

    def __init__(self, id_tokens: IdTokens) -> None:
        self.id_tokens = id_tokens

    async def extend(self, issuance: Issuance, token_set: TokenSet, issued_at: int) -> TokenSet:
        sign_in, alg = issuance.sign_in, issuance.id_token_alg
        # An OpenID grant (contract 15): its sign-in remembered (only an OpenID request's code and its
        # refresh tokens remember one, with the app's algorithm), and `openid` among the scopes issued
        # (a refresh may narrow it away).
        if sign_in is None or alg is None or OPENID not in issuance.scopes:
            return token_set
        id_token = await self.id_tokens.mint(alg=alg, client_id=issuance.client_id, asu=issuance.asu,
                                             auth_time=sign_in.auth_time, nonce=issuance.nonce,
                                             session_id=sign_in.session_id, access_token=token_set.access_token,
                                             now=issued_at, amr=sign_in.amr)
        return replace(token_set, id_token=id_token)

"""Access tokens (contract section 6): minting and checking `lba_at_` access tokens (RFC 9068), and
the token set a grant answers with (spec section 2). The grants themselves are in core/oauth/."""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core.acr import acr_of
from lbauth.core.crypto.keys import KeyRing
from lbauth.core.oauth.checklist import CheckList
from lbauth.settings import Settings
from lbauth.verify import PREFIX, TokenError, check_times, decode_access_token


@dataclass(frozen=True)
class TokenSet:
    """The `data` of a token response (spec section 2)."""
    access_token: str
    refresh_token: str
    expires_in: int
    scopes: tuple[str, ...]
    id_token: str | None = None  # an OpenID grant's (contract 15)
    token_type: str = "Bearer"  # noqa: S105 - "DPoP" for a DPoP-bound access token (RFC 9449 5)

    def envelope_data(self) -> dict[str, Any]:
        data = {"accessToken": self.access_token, "refreshToken": self.refresh_token, "tokenType": self.token_type,
                "expiresIn": self.expires_in, "scope": list(self.scopes)}
        if self.id_token is not None:
            data["idToken"] = self.id_token
        return data

    def rfc6749(self) -> dict[str, Any]:
        """RFC 6749 5.1; OpenID Connect Core 3.1.3.3 adds `id_token`."""
        response = {"access_token": self.access_token, "token_type": self.token_type, "expires_in": self.expires_in,
                    "refresh_token": self.refresh_token, "scope": " ".join(self.scopes)}
        if self.id_token is not None:
            response["id_token"] = self.id_token
        return response


@dataclass(frozen=True, slots=True)
class SignIn:
    """The user's sign-in behind a grant, as its code and refresh tokens remember it: when
    (`auth_time`) and how (RFC 8176 `amr`, hence `acr`: contract 19), which every token carries,
    and an OpenID request's session (the ID token's `sid`: contract 15)."""
    auth_time: int
    session_id: str | None
    amr: tuple[str, ...] = ("pwd",)

    @property
    def acr(self) -> str:
        return acr_of(self.amr)

    @staticmethod
    def remembered(auth_time: int | None, session_id: str | None, amr: str = "pwd") -> SignIn | None:
        """The sign-in a code or refresh token row remembers, if it remembers one (a row written
        before every code kept its sign-in does not)."""
        return SignIn(auth_time, session_id, tuple(amr.split())) if auth_time is not None else None


class AccessTokens:
    """Mints and checks access tokens with the process's current key ring and check-list."""

    # Verified tokens remembered (check): about 1.5 KB each, so at most ~6 MB per process. `make soak`
    # found 100,000 (~150 MB) too many: the memory of a busy server kept growing for minutes.
    VERIFIED_MAX = 4_096

    def __init__(self, settings: Settings, clock: Clock, keyring: Callable[[], KeyRing], checklist: CheckList) -> None:
        self.settings, self.clock, self._keyring, self.checklist = settings, clock, keyring, checklist
        self._verified: dict[bytes, dict[str, Any]] = {}
        self._verified_version: object = None

    @property
    def public_keys(self) -> dict[str, tuple[str, Any]]:
        """The current key ring's public keys: what this server's tokens verify against."""
        return self._keyring().public_keys

    async def issue_time(self, grant_id: str, started: int, live: Callable[[], Awaitable[bool]]) -> int:
        """The token's `iat`: `started` (before the read that found the grant live), or just past a
        grant entry that may have raced the request if `live()` still finds its refresh token
        unrevoked. Why: docs/architecture.md, "Revocation races"."""
        issued_at = started
        while (revoked_at := self.checklist.grant_revoked_at(grant_id)) is not None and issued_at <= revoked_at:
            if self.clock.now() < revoked_at + 1:
                await self.clock.sleep(revoked_at + 1 - self.clock.now())
            issued_at = int(self.clock.now())
            if not await live():
                return started
        return issued_at

    def mint(self, *, user_id: str, client_id: str, scopes: tuple[str, ...] | list[str], grant_id: str, asu: str,
             jti: str, now: int, audience: str | list[str] | None = None, sign_in: SignIn | None = None,
             jkt: str | None = None) -> str:
        """`audience`: the token's resources (RFC 8707, contract 17); None, LBAUTH_AUDIENCE.
        `sign_in`: the sign-in behind the grant, as `auth_time`, `acr` and `amr` (RFC 9068 2.2.1).
        `jkt`: the client's DPoP key, as `cnf.jkt` (RFC 9449 6.1)."""
        signer = self._keyring().signer
        if signer is None:
            raise errors.ServerUnavailable("No signing key is active.")
        claims: dict[str, Any] = {
            "iss": self.settings.issuer, "aud": self.settings.audience if audience is None else audience,
            "sub": user_id, "client_id": client_id, "scope": " ".join(scopes), "iat": now,
            "exp": now + self.settings.access_token_ttl, "jti": jti, "gid": grant_id, "asu": asu}
        if sign_in is not None:
            claims.update(auth_time=sign_in.auth_time, acr=sign_in.acr, amr=list(sign_in.amr))
        if jkt is not None:
            claims["cnf"] = {"jkt": jkt}
        return PREFIX + signer.sign(claims, typ="at+jwt")

    def check(self, token: str) -> dict[str, Any]:
        """The claims of a live access token, or the error to answer (no database read). No leeway:
        the server mints and checks with one clock; resource services allow for skew (lbauth.verify).

        A token whose signature this process has verified before is not verified again (the
        signature is most of the cost of /api/auth/me): its claims are kept by the token's
        SHA-256 until the key ring changes. Its times and the check-list are checked every time."""
        keyring, now = self._keyring(), self.clock.now()
        if keyring.version != self._verified_version:
            self._verified.clear()
            self._verified_version = keyring.version
        fingerprint = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        try:
            claims = self._verified.get(fingerprint)
            if claims is None:
                claims = decode_access_token(token, keyring.public_keys, issuer=self.settings.issuer,
                                             audience=self.settings.audience, now=now, leeway=0)
                if len(self._verified) >= self.VERIFIED_MAX:
                    del self._verified[next(iter(self._verified))]  # the oldest
                self._verified[fingerprint] = claims
            else:
                check_times(claims, now)
        except TokenError as exc:
            raise errors.by_sub_code(exc.sub_code)(exc.message) from None
        if self.checklist.is_revoked(claims.get("gid"), claims["jti"], claims["iat"]):
            raise errors.TokenRevoked()
        return claims


def new_jti() -> str:
    return secrets.token_urlsafe(16)


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 4.6: BASE64URL(SHA256(ASCII(code_verifier)))."""
    digest = hashlib.sha256(verifier.encode("ascii", "replace")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

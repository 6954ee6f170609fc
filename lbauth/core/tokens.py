"""The token endpoints' use cases (spec 4.3 and 4.4, contract section 6): client authentication,
code redemption, refresh, and minting and checking `lba_at_` access tokens (RFC 9068)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import jwt
from sqlalchemy import Connection, Row

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import opaque
from lbauth.core.keys import KeyRing
from lbauth.core.revocation import KEEP_PAST_EXPIRY, CheckList, notify, refresh_checklist
from lbauth.settings import Settings
from lbauth.storage.db import Database
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import revocations as revocations_repo
from lbauth.storage.repo import tokens as tokens_repo
from lbauth.verify import PREFIX, TokenError, check_times, decode_access_token

_DUMMY_DIGEST = opaque.digest("lbauth: no such client")


@dataclass(frozen=True)
class TokenSet:
    """The `data` of a token response (spec section 2)."""
    access_token: str
    refresh_token: str
    expires_in: int
    scopes: tuple[str, ...]

    def envelope_data(self) -> dict[str, Any]:
        return {"accessToken": self.access_token, "refreshToken": self.refresh_token, "tokenType": "Bearer",
                "expiresIn": self.expires_in, "scope": list(self.scopes)}

    def rfc6749(self) -> dict[str, Any]:
        """RFC 6749 5.1."""
        return {"access_token": self.access_token, "token_type": "Bearer", "expires_in": self.expires_in,
                "refresh_token": self.refresh_token, "scope": " ".join(self.scopes)}


class AccessTokens:
    """Mints and checks access tokens with the process's current key ring and check-list."""

    # Verified tokens remembered (check): about 1.5 KB each, so at most ~6 MB per process. `make soak`
    # found 100,000 (~150 MB) too many: the memory of a busy server kept growing for minutes.
    VERIFIED_MAX = 4_096

    def __init__(self, settings: Settings, clock: Clock, keyring: Callable[[], KeyRing], checklist: CheckList) -> None:
        self.settings, self.clock, self._keyring, self.checklist = settings, clock, keyring, checklist
        self._verified: dict[bytes, dict[str, Any]] = {}
        self._verified_version: object = None

    async def issue_time(self, grant_id: str, started: int, live: Callable[[], Awaitable[bool]]) -> int:
        """The token's `iat`: `started`, when its request began, before the database read that
        found its code or refresh token live, so that a revocation committed after that read
        covers the token wherever and whenever it is minted (revocation.cover_racing_tokens).

        A grant entry already known here at or after `started` may have raced the request. The
        token is then stamped past it (a grant entry refuses the grant's tokens with
        `iat <= revokedAt`, so a token minted in the same second as an RFC 7009 revocation of
        another refresh token waits for the next second), but only if, after that stamp was taken,
        `live()` finds the request's refresh token unrevoked. If the entry's transaction revoked it
        (the grant revoked, that token revoked, its code replayed), the request came first and its
        token is one of those the entry revokes: it keeps `started`."""
        issued_at = started
        while (revoked_at := self.checklist.grant_revoked_at(grant_id)) is not None and issued_at <= revoked_at:
            if self.clock.now() < revoked_at + 1:
                await self.clock.sleep(revoked_at + 1 - self.clock.now())
            issued_at = int(self.clock.now())
            if not await live():
                return started
        return issued_at

    def mint(self, *, user_id: str, client_id: str, scopes: tuple[str, ...] | list[str], grant_id: str, asu: str,
             jti: str, now: int) -> str:
        signer = self._keyring().signer
        if signer is None:
            raise errors.ServerUnavailable("No signing key is active.")
        claims = {"iss": self.settings.issuer, "aud": self.settings.audience, "sub": user_id, "client_id": client_id,
                  "scope": " ".join(scopes), "iat": now, "exp": now + self.settings.access_token_ttl, "jti": jti,
                  "gid": grant_id, "asu": asu}
        return PREFIX + jwt.encode(claims, signer.private_key, algorithm=signer.alg,
                                   headers={"kid": signer.kid, "typ": "at+jwt"})

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
            raise errors.by_sub_code(exc.sub_code)() from None
        if self.checklist.is_revoked(claims.get("gid"), claims["jti"], claims["iat"]):
            raise errors.TokenRevoked()
        return claims


def new_jti() -> str:
    return secrets.token_urlsafe(16)


def pkce_challenge(verifier: str) -> str:
    """RFC 7636 4.6: BASE64URL(SHA256(ASCII(code_verifier)))."""
    digest = hashlib.sha256(verifier.encode("ascii", "replace")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


async def authenticate_client(db: Database, client_id: str, client_secret: str) -> Row:
    """The app, if the secret is right; the same error whether the client or the secret is wrong."""
    app = await db.read(_checked_client, client_id, opaque.digest(client_secret))
    if isinstance(app, errors.LbauthError):
        raise app
    return app


def _checked_client(conn: Connection, client_id: str, secret_digest: str) -> Row | errors.LbauthError:
    """The app, or ClientSecretMismatch after the same constant-time comparison either way."""
    app = apps_repo.by_client_id(conn, client_id)
    if not hmac.compare_digest(secret_digest, app.client_secret_hash if app else _DUMMY_DIGEST) or app is None:
        return errors.ClientSecretMismatch()
    return app


async def exchange_code(db: Database, clock: Clock, tokens: AccessTokens, *, client_id: str, client_secret: str,
                        code: str, redirect_uri: str, code_verifier: str | None) -> TokenSet:
    """Spec 4.3: a code for a token set, exactly once, for the client it was issued to.

    The hot path is one unit of work that authenticates the client, claims the code and stores
    the refresh token (repo/codes.py: one statement on PostgreSQL, two on SQLite). Only when it
    claims nothing does a second one find out why, in the order a client expects its errors:
    the client's credentials first, then the code.
    """
    now, jti = int(clock.now()), new_jti()
    secret_digest = opaque.digest(client_secret)
    refresh_token = opaque.new_secret(opaque.REFRESH_TOKEN)
    settings = tokens.settings
    claimed = None
    if opaque.has_prefix(code, opaque.CODE):
        challenge = pkce_challenge(code_verifier) if code_verifier is not None else None
        claimed = await db.transaction(
            codes_repo.redeem, single_statement=True, code_hash=opaque.digest(code), client_id=client_id,
            client_secret_hash=secret_digest, redirect_uri=redirect_uri, challenge=challenge, now=now,
            access_jti=jti, refresh_hash=opaque.digest(refresh_token),
            refresh_expires_at=now + settings.refresh_token_ttl)
    if claimed is None:
        error = await db.transaction(_why_not_redeemed, client_id=client_id, secret_digest=secret_digest, code=code,
                                     redirect_uri=redirect_uri, now=now, access_ttl=settings.access_token_ttl)
        if isinstance(error, errors.CodeUsed):
            await refresh_checklist(db, clock, tokens.checklist)
        raise error
    scopes = tuple(claimed.scopes)
    issued_at = await tokens.issue_time(claimed.grant_id, now, lambda: _live(db, opaque.digest(refresh_token)))
    access_token = tokens.mint(user_id=claimed.user_id, client_id=client_id, scopes=scopes,
                               grant_id=claimed.grant_id, asu=claimed.asu, jti=jti, now=issued_at)
    return TokenSet(access_token, refresh_token, settings.access_token_ttl, scopes)


def _why_not_redeemed(conn: Connection, *, client_id: str, secret_digest: str, code: str, redirect_uri: str,
                      now: int, access_ttl: int) -> errors.LbauthError:
    """Why a code was not redeemed. A code used before has what its first redemption issued
    revoked here (RFC 6749 4.1.2), so this returns the error instead of raising it: the
    revocation must be committed."""
    app = _checked_client(conn, client_id, secret_digest)
    if isinstance(app, errors.LbauthError):
        return app
    if not opaque.has_prefix(code, opaque.CODE):
        return errors.CodeInvalid()
    code_hash = opaque.digest(code)
    row = codes_repo.by_hash(conn, code_hash)
    if row is None or row.app_id != app.id or row.revoked_at is not None:
        return errors.CodeInvalid()
    if row.used_at is not None:
        # The first redemption's refresh token, and every access token of the grant issued so far
        # (the first one and any refreshed from it): a replayed code means the code leaked.
        tokens_repo.revoke_from_code(conn, code_hash, now)
        revocations_repo.insert_revocation(conn, grant_id=row.grant_id, revoked_at=now,
                                           expires_at=now + access_ttl + KEEP_PAST_EXPIRY)
        notify(conn)
        return errors.CodeUsed()
    if row.expires_at <= now:
        return errors.CodeExpired()
    if row.redirect_uri != redirect_uri:
        return errors.RedirectUriMismatch("redirect_uri must equal the one sent in the authorization request.")
    if row.code_challenge is None:
        return errors.CodeVerifierInvalid("This code was issued without a PKCE challenge; send no code_verifier.")
    return errors.CodeVerifierInvalid()  # the only check left: the verifier does not match the challenge


async def refresh(db: Database, clock: Clock, tokens: AccessTokens, *, client_id: str, client_secret: str,
                  refresh_token: str, scope: tuple[str, ...] | None = None) -> TokenSet:
    """Spec 4.4: a new access token; the refresh token is returned unchanged (no rotation).
    `scope` (RFC 6749 6) may narrow the new token to a subset of the granted scopes.
    One statement finds the token and authenticates its client; a second, only on failure,
    says whether the client or the token was wrong."""
    secret_digest = opaque.digest(client_secret)
    now, row = int(clock.now()), None  # now: before the read (AccessTokens.issue_time)
    if opaque.has_prefix(refresh_token, opaque.REFRESH_TOKEN):
        row = await db.read(tokens_repo.for_client, opaque.digest(refresh_token), client_id, secret_digest)
    if row is None:  # bound to its client (contract 6): another app's token is as good as none
        app = await db.read(_checked_client, client_id, secret_digest)
        raise app if isinstance(app, errors.LbauthError) else errors.RefreshTokenInvalid()
    if row.revoked_at is not None:
        raise errors.RefreshTokenRevoked()
    if row.expires_at <= now:
        raise errors.RefreshTokenExpired()
    granted = tuple(row.scopes)
    if scope is not None:
        if not set(scope) <= set(granted):
            raise errors.ScopeInvalid("A refresh may not ask for scopes beyond the grant.")
        granted = scope
    issued_at = await tokens.issue_time(row.grant_id, now, lambda: _live(db, row.token_hash))
    access_token = tokens.mint(user_id=row.user_id, client_id=client_id, scopes=granted, grant_id=row.grant_id,
                               asu=row.asu, jti=new_jti(), now=issued_at)
    return TokenSet(access_token, refresh_token, tokens.settings.access_token_ttl, granted)


async def _live(db: Database, refresh_hash: str) -> bool:
    """Is this refresh token still unrevoked? Asked only when a revocation may have raced a request."""
    row = await db.read(tokens_repo.by_hash, refresh_hash)
    return row is not None and row.revoked_at is None


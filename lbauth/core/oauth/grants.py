"""The token endpoint's grant types (RFC 6749 4.1.3 and 6; spec 4.3, 4.4; contract 6).

Each grant parses its parameters, then issues a token set for an authenticated client. The
client's credentials are checked inside the grant's own statement, not before it: one unit of
work per request on the hot path. A public client's refresh tokens rotate (contract 17).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, NoReturn, TypeVar

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import resources, scopes
from lbauth.core.crypto import opaque
from lbauth.core.fields import require
from lbauth.core.oauth.checklist import CheckList, enter_grant, refresh_checklist
from lbauth.core.oauth.client_auth import ClientCredentials, checked_client
from lbauth.core.oauth.grant_revocation import revoke_reused_grant
from lbauth.core.oauth.tokens import AccessTokens, TokenSet, new_jti, pkce_challenge
from lbauth.core.oidc.id_tokens import IdTokens
from lbauth.settings import Settings
from lbauth.storage import Connection
from lbauth.storage.db import CommitThenRaise, Database
from lbauth.storage.records import RefreshToken
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import codes as codes_repo
from lbauth.storage.repo import tokens as tokens_repo

RequestT = TypeVar("RequestT")

# RFC 9700 4.14.2: a retired refresh token presented this long after its rotation means a copy is
# in other hands, and revokes the grant; sooner, it is two refreshes racing (contract 17).
ROTATION_GRACE_SECONDS = 10


class GrantType(ABC, Generic[RequestT]):
    """One `grant_type` of the token endpoint."""

    grant_type: ClassVar[str]

    def __init__(self, db: Database, clock: Clock, settings: Settings, tokens: AccessTokens,
                 checklist: CheckList, id_tokens: IdTokens) -> None:
        self.db, self.clock, self.settings, self.tokens, self.checklist = db, clock, settings, tokens, checklist
        self.id_tokens = id_tokens

    @abstractmethod
    def parse(self, params: Mapping[str, Any]) -> RequestT:
        """The grant's parameters, or the error (ValidationFailed, ScopeInvalid) that refuses them."""

    @abstractmethod
    async def issue(self, client: ClientCredentials, request: RequestT) -> TokenSet:
        """Authenticate the client and issue its tokens, or raise why not: the client's error first."""

    async def _live(self, refresh_hash: str) -> bool:
        """Is this refresh token still unrevoked? Asked only when a revocation may have raced a request."""
        row = await self.db.read(tokens_repo.by_hash, refresh_hash)
        return row is not None and row.revoked_at is None


def _resource_indicators(params: Mapping[str, Any]) -> tuple[str, ...]:
    """RFC 8707 2: the `resource` values (it may repeat: the handler passes a list), normalised."""
    values = params.get("resource") or ()
    return resources.parse([values] if isinstance(values, str) else values)


@dataclass(frozen=True)
class CodeRequest:
    code: str
    redirect_uri: str
    code_verifier: str | None
    resources: tuple[str, ...] = ()  # RFC 8707, normalised: the code's resources this token is for


class AuthorizationCodeGrant(GrantType[CodeRequest]):
    """A code for a token set, exactly once, for the client it was issued to (RFC 6749 4.1.3, spec 4.3)."""

    grant_type = "authorization_code"

    def parse(self, params: Mapping[str, Any]) -> CodeRequest:
        code, redirect_uri = require(params, "code", "redirect_uri")
        return CodeRequest(code, redirect_uri, params.get("code_verifier") or None, _resource_indicators(params))

    async def issue(self, client: ClientCredentials, request: CodeRequest) -> TokenSet:
        """The hot path is one unit of work that authenticates the client, claims the code and
        stores the refresh token (repo/codes.py: one statement on PostgreSQL, two on SQLite). Only
        when it claims nothing does a second one find out why, in the order a client expects its
        errors: the client's credentials first, then the code."""
        now, jti = int(self.clock.now()), new_jti()
        refresh_token = opaque.new_secret(opaque.REFRESH_TOKEN)
        claimed = None
        if request.resources and opaque.has_prefix(request.code, opaque.CODE):
            # RFC 8707 2: a resource the code was not issued for is refused before the code is used up
            # (a request naming no resource, the usual one, costs no statement here).
            await self.db.read(_check_code_resources, client, opaque.digest(request.code), request.resources)
        if opaque.has_prefix(request.code, opaque.CODE):
            verifier = request.code_verifier
            claimed = await self.db.transaction(
                codes_repo.redeem, single_statement=True, code_hash=opaque.digest(request.code),
                client_id=client.client_id, client_secret_hash=client.secret_digest, redirect_uri=request.redirect_uri,
                challenge=pkce_challenge(verifier) if verifier is not None else None, now=now, access_jti=jti,
                refresh_hash=opaque.digest(refresh_token), refresh_expires_at=now + self.settings.refresh_token_ttl)
        if claimed is None:
            try:
                await self.db.transaction(_why_not_redeemed, client=client, request=request, now=now,
                                          access_ttl=self.settings.access_token_ttl)
            except errors.CodeUsed:
                await refresh_checklist(self.db, self.clock, self.checklist)
                raise
        granted = tuple(claimed.scopes)
        issued_at = await self.tokens.issue_time(claimed.grant_id, now,
                                                 lambda: self._live(opaque.digest(refresh_token)))
        audience = (resources.audience(request.resources, claimed.resources)
                    if request.resources or claimed.resources else None)
        access_token = self.tokens.mint(user_id=claimed.user_id, client_id=client.client_id, scopes=granted,
                                        grant_id=claimed.grant_id, asu=claimed.asu, jti=jti, now=issued_at,
                                        audience=audience)
        id_token = None
        if claimed.id_token_alg is not None and claimed.auth_time is not None:  # an OpenID request's code
            id_token = await self.id_tokens.mint(
                alg=claimed.id_token_alg, client_id=client.client_id, asu=claimed.asu, auth_time=claimed.auth_time,
                nonce=claimed.nonce, session_id=claimed.session_id, access_token=access_token, now=issued_at)
        return TokenSet(access_token, refresh_token, self.settings.access_token_ttl, granted, id_token)


def _check_code_resources(conn: Connection, client: ClientCredentials, code_hash: str,
                          requested: Sequence[str]) -> None:
    """invalid_target when the client's own live code was not issued for every resource named; any
    other fault is left to the redemption, which reports it in the usual order (client first)."""
    app = checked_client(conn, client.client_id, client.secret_digest)
    row = codes_repo.by_hash(conn, code_hash)
    if row is not None and row.app_id == app.id and row.used_at is None and row.revoked_at is None:
        resources.audience(requested, row.resources)


def _why_not_redeemed(conn: Connection, *, client: ClientCredentials, request: CodeRequest, now: int,
                      access_ttl: int) -> NoReturn:
    """Why a code was not redeemed, raised. A code used before has what its first redemption
    issued revoked here (RFC 6749 4.1.2), committed before CodeUsed is raised."""
    app = checked_client(conn, client.client_id, client.secret_digest)
    if not opaque.has_prefix(request.code, opaque.CODE):
        raise errors.CodeInvalid()
    code_hash = opaque.digest(request.code)
    row = codes_repo.by_hash(conn, code_hash)
    if row is None or row.app_id != app.id or row.revoked_at is not None:
        raise errors.CodeInvalid()
    if row.used_at is not None:
        # The first redemption's refresh token, and every access token of the grant issued so far
        # (the first one and any refreshed from it): a replayed code means the code leaked.
        tokens_repo.revoke_from_code(conn, code_hash, now)
        enter_grant(conn, row.grant_id, now, access_ttl)
        changes_repo.notify(conn)
        raise CommitThenRaise(errors.CodeUsed())
    if row.expires_at <= now:
        raise errors.CodeExpired()
    if row.redirect_uri != request.redirect_uri:
        raise errors.RedirectUriMismatch("redirect_uri must equal the one sent in the authorization request.")
    if row.code_challenge is None:
        raise errors.CodeVerifierInvalid("This code was issued without a PKCE challenge; send no code_verifier.")
    raise errors.CodeVerifierInvalid()  # the only check left: the verifier does not match the challenge


@dataclass(frozen=True)
class RefreshRequest:
    refresh_token: str
    scope: tuple[str, ...] | None  # RFC 6749 6: narrows the new token to a subset of the grant
    resources: tuple[str, ...] = ()  # RFC 8707, normalised: narrows it to some of the grant's resources


class RefreshTokenGrant(GrantType[RefreshRequest]):
    """A new access token. A confidential client's refresh token is returned unchanged, no rotation
    (RFC 6749 6, spec 4.4); a public client's is replaced by a new one at every refresh, and a
    retired one presented again is refused and may revoke the grant (RFC 9700 4.14.2, contract 17)."""

    grant_type = "refresh_token"

    def parse(self, params: Mapping[str, Any]) -> RefreshRequest:
        (refresh_token,) = require(params, "refresh_token")
        scope = scopes.parse_space_separated(params["scope"]) if params.get("scope") else None
        return RefreshRequest(refresh_token, scope, _resource_indicators(params))

    async def issue(self, client: ClientCredentials, request: RefreshRequest) -> TokenSet:
        """One statement finds the token and authenticates its client; a second, only on failure,
        says whether the client or the token was wrong. A public client's token is then rotated
        (one more transaction); a confidential client's path has no more statements."""
        refresh_token, secret_digest = request.refresh_token, client.secret_digest
        now, row = int(self.clock.now()), None  # now: before the read (AccessTokens.issue_time)
        if opaque.has_prefix(refresh_token, opaque.REFRESH_TOKEN):
            row = await self.db.read(tokens_repo.for_client, opaque.digest(refresh_token), client.client_id,
                                     secret_digest)
        if row is None:  # bound to its client (contract 6): another app's token is as good as none
            await self.db.read(checked_client, client.client_id, secret_digest)  # raises for a bad client
            raise errors.RefreshTokenInvalid()
        if row.revoked_at is not None:
            raise errors.RefreshTokenRevoked()
        if row.rotated_at is not None:  # only a public client's are ever rotated
            await self._reused(client, row, now)
        if row.expires_at <= now:
            raise errors.RefreshTokenExpired()
        granted = tuple(row.scopes)
        if request.scope is not None:
            if not set(request.scope) <= set(granted):
                raise errors.ScopeInvalid("A refresh may not ask for scopes beyond the grant.")
            granted = request.scope
        audience = resources.audience(request.resources, row.resources) if request.resources or row.resources else None
        live_hash = row.token_hash
        if client.public:  # the statement above matched a public app's digest: this app is public
            refresh_token, live_hash = await self._rotate(row, now)
        issued_at = await self.tokens.issue_time(row.grant_id, now, lambda: self._live(live_hash))
        access_token = self.tokens.mint(user_id=row.user_id, client_id=client.client_id, scopes=granted,
                                        grant_id=row.grant_id, asu=row.asu, jti=new_jti(), now=issued_at,
                                        audience=audience)
        id_token = None
        if row.auth_time is not None and "openid" in granted:
            # OpenID Connect Core 12.2: the same sub and auth_time as the first ID token; no nonce.
            id_token = await self.id_tokens.mint(
                alg=row.id_token_alg, client_id=client.client_id, asu=row.asu, auth_time=row.auth_time, nonce=None,
                session_id=row.session_id, access_token=access_token, now=issued_at)
        return TokenSet(access_token, refresh_token, self.settings.access_token_ttl, granted, id_token)

    async def _rotate(self, row: RefreshToken, now: int) -> tuple[str, str]:
        """The presented token retired and its successor stored, or invalid_grant if a concurrent
        refresh (or a revocation) got there first."""
        successor = opaque.new_secret(opaque.REFRESH_TOKEN)
        successor_hash = opaque.digest(successor)
        if not await self.db.transaction(tokens_repo.rotate, row, new_hash=successor_hash, now=now,
                                         expires_at=now + self.settings.refresh_token_ttl):
            raise errors.RefreshTokenRevoked("This refresh token has been replaced by a newer one.")
        return successor, successor_hash

    async def _reused(self, client: ClientCredentials, row: RefreshToken, now: int) -> NoReturn:
        """A retired token again: within the grace period two refreshes raced, and nothing more is
        done; after it, the grant is revoked (RFC 9700 4.14.2)."""
        assert row.rotated_at is not None
        if now - row.rotated_at > ROTATION_GRACE_SECONDS:
            await revoke_reused_grant(self.db, self.clock, self.checklist, client_id=client.client_id,
                                      grant_id=row.grant_id, user_id=row.user_id,
                                      access_ttl=self.settings.access_token_ttl)
            raise errors.RefreshTokenRevoked("This refresh token was used after it had been replaced: "
                                             "the authorization is revoked.")
        raise errors.RefreshTokenRevoked("This refresh token has been replaced by a newer one.")

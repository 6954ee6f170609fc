"""The token endpoint's grant types (RFC 6749 4.1.3 and 6; spec 4.3, 4.4; contract 6).

Each grant parses its parameters, checks what it is given for an authenticated client and says
what to issue (an `Issuance`); the issuing step (issuing.py) mints the tokens, the same way for
every grant. The client's credentials are checked inside the grant's own statement, not before
it: one unit of work per request on the hot path. A public client's refresh tokens rotate
(contract 17).
"""

from __future__ import annotations

import hmac
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, NoReturn, TypeVar, assert_never

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import resources, scopes
from lbauth.core.crypto import opaque
from lbauth.core.fields import require
from lbauth.core.oauth.checklist import CheckList, enter_grant, refresh_checklist
from lbauth.core.oauth.client_auth import ClientCredentials, checked_client
from lbauth.core.oauth.dpop import REPLAYED, spend_in
from lbauth.core.oauth.grant_revocation import revoke_reused_grant
from lbauth.core.oauth.issuing import Issuance, Issuer, SignIn
from lbauth.core.oauth.tokens import TokenSet, new_jti, pkce_challenge
from lbauth.settings import Settings
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import CommitThenRaise, Database
from lbauth.storage.records import DPOP_ANY_KEY, ClaimedCode, CodeRule, CodeState, ProvenKey, RefreshToken
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

    def __init__(self, db: Database, clock: Clock, settings: Settings, checklist: CheckList, issuer: Issuer) -> None:
        self.db, self.clock, self.settings, self.checklist, self.issuer = db, clock, settings, checklist, issuer

    @abstractmethod
    def parse(self, params: Mapping[str, Any]) -> RequestT:
        """The grant's parameters, or the error (ValidationFailed, ScopeInvalid) that refuses them."""

    @abstractmethod
    async def issue(self, client: ClientCredentials, request: RequestT, proof: ProvenKey | None = None) -> TokenSet:
        """Authenticate the client and issue its tokens, or raise why not: the client's error first.
        `proof`: the key the request's DPoP proof showed, the access token's binding (RFC 9449 5),
        its proof recorded as used by the grant."""


def resource_indicators(params: Mapping[str, Any]) -> tuple[str, ...]:
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
        return CodeRequest(code, redirect_uri, params.get("code_verifier") or None, resource_indicators(params))

    async def issue(self, client: ClientCredentials, request: CodeRequest, proof: ProvenKey | None = None,
                    ) -> TokenSet:
        """The hot path is one unit of work that authenticates the client, claims the code and
        stores the refresh token (repo/codes.py: one statement on PostgreSQL, two on SQLite), and
        records a DPoP proof's use (in the same statement; one more on SQLite). Only when it claims
        nothing does a second one find out why, in the order a client expects its errors: the
        client's credentials first, then the code."""
        key = proof.jkt if proof is not None else None
        now, jti = int(self.clock.now()), new_jti()
        refresh_token = opaque.new_secret(opaque.REFRESH_TOKEN)
        verifier, redeemed, well_formed = request.code_verifier, None, opaque.has_prefix(request.code, opaque.CODE)
        presented: dict[str, Any] = {  # what the claim and the explanation of a failed one both judge
            "code_hash": opaque.digest(request.code) if well_formed else "", "client_id": client.client_id,
            "client_secret_hash": client.secret_digest, "redirect_uri": request.redirect_uri,
            "challenge": pkce_challenge(verifier) if verifier is not None else None, "now": now, "dpop_jkt": key}
        if well_formed:
            # A request naming a resource checks it in the claim's own transaction, which a refusal
            # rolls back: not one statement in autocommit (PostgreSQL), but no statement more.
            redeemed = await self.db.transaction(
                _redeem, single_statement=not request.resources, requested=request.resources, access_jti=jti,
                refresh_hash=opaque.digest(refresh_token), refresh_expires_at=now + self.settings.refresh_token_ttl,
                refresh_jkt=refresh_binding(client, key), proof=proof, **presented)
        if redeemed is None:
            try:
                await self.db.transaction(_why_not_redeemed, client=client, request=request, presented=presented,
                                          access_ttl=self.settings.access_token_ttl)
            except errors.CodeUsed:
                await refresh_checklist(self.db, self.clock, self.checklist)
                raise
        claimed, audience = redeemed
        return await self.issuer.issue(Issuance(
            client_id=client.client_id, user_id=claimed.user_id, asu=claimed.asu, grant_id=claimed.grant_id,
            scopes=tuple(claimed.scopes), audience=audience, refresh_token=refresh_token, started=now, jti=jti,
            sign_in=SignIn.remembered(claimed.auth_time, claimed.session_id, claimed.amr),
            id_token_alg=claimed.id_token_alg,
            nonce=claimed.nonce, jkt=key))


def refresh_binding(client: ClientCredentials, key: str | None) -> str | None:
    """What a new refresh token is bound to (RFC 9449 5): a public client's, to its proof's key; a
    confidential client's, to a proof of any key once its grant began with DPoP (no downgrade)."""
    if key is None:
        return None
    return key if client.public else DPOP_ANY_KEY


def check_refresh_binding(bound: str | None, key: str | None) -> None:
    """A DPoP-bound refresh token needs a proof, of its own key unless it is bound to any (RFC 9449 5)."""
    if bound is None:
        return
    if key is None:
        raise errors.DPoPProofRefused("This refresh token is DPoP-bound: send a DPoP proof.")
    if bound != DPOP_ANY_KEY and not hmac.compare_digest(bound, key):
        raise errors.DPoPProofRefused("The DPoP proof is made with another key than this refresh token's.")


def _redeem(conn: Connection, *, requested: Sequence[str], **redemption: Any,
            ) -> tuple[ClaimedCode, str | list[str] | None] | None:
    """The code claimed (`codes_repo.redeem`) and the access token's audience, or None. A resource
    the code was not issued for is invalid_target, raised before the commit: the claim is rolled
    back and the code not used up (RFC 8707 2). A DPoP proof used before claims nothing."""
    try:
        claimed = codes_repo.redeem(conn, **redemption)
    except Duplicate:
        raise errors.DPoPProofRefused(REPLAYED) from None
    if claimed is None:
        return None
    return claimed, resources.audience(requested, claimed.resources)


def _why_not_redeemed(conn: Connection, *, client: ClientCredentials, request: CodeRequest,
                      presented: dict[str, Any], access_ttl: int) -> NoReturn:
    """Why a code was not redeemed, raised: the client's credentials first, then the first rule
    the code breaks (CodeRule, judged by the claim's own conditions), with invalid_target for a
    resource it was not issued for as soon as the code is the client's live, unused one (as when
    it is claimed). A code used before has what its first redemption issued revoked here (RFC
    6749 4.1.2), committed before CodeUsed is raised."""
    checked_client(conn, client.client_id, client.secret_digest)
    state = codes_repo.explain(conn, **presented) if presented["code_hash"] else None  # "": no code of ours
    if state is None or not state.broken:  # no such code; or none broken: no claim can have failed on it
        raise errors.CodeInvalid()
    broken = state.broken[0]
    if broken is CodeRule.UNUSED:
        # The first redemption's refresh token, and every access token of the grant issued so far
        # (the first one and any refreshed from it): a replayed code means the code leaked.
        now = presented["now"]
        tokens_repo.revoke_from_code(conn, presented["code_hash"], now)
        enter_grant(conn, state.grant_id, now, access_ttl)
        changes_repo.notify(conn)
        raise CommitThenRaise(errors.CodeUsed())
    if broken not in (CodeRule.ISSUED_TO_CLIENT, CodeRule.NOT_REVOKED):
        resources.audience(request.resources, state.resources)  # RFC 8707 2
    raise _refusal(broken, state)


def _refusal(broken: CodeRule, state: CodeState) -> errors.LbauthError:
    """The error a client hears for a code that breaks `broken` (contract 5)."""
    match broken:
        case CodeRule.ISSUED_TO_CLIENT | CodeRule.NOT_REVOKED:
            return errors.CodeInvalid()  # another client's code is as good as none
        case CodeRule.UNUSED:
            return errors.CodeUsed()
        case CodeRule.UNEXPIRED:
            return errors.CodeExpired()
        case CodeRule.SAME_REDIRECT_URI:
            return errors.RedirectUriMismatch("redirect_uri must equal the one sent in the authorization request.")
        case CodeRule.PKCE_VERIFIED if not state.has_challenge:
            return errors.CodeVerifierInvalid("This code was issued without a PKCE challenge; send no code_verifier.")
        case CodeRule.PKCE_VERIFIED:
            return errors.CodeVerifierInvalid()
        case CodeRule.SAME_DPOP_KEY:
            return errors.DPoPProofRefused("This code is bound to a DPoP key (dpop_jkt, or the app's setting): "
                                           "send a DPoP proof made with it.")
        case _:
            assert_never(broken)


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
        return RefreshRequest(refresh_token, scope, resource_indicators(params))

    async def issue(self, client: ClientCredentials, request: RefreshRequest, proof: ProvenKey | None = None,
                    ) -> TokenSet:
        """One statement finds the token and authenticates its client; a second, only on failure,
        says whether the client or the token was wrong. A public client's token is then rotated
        (one more transaction); a confidential client's path has no more statements. A DPoP
        proof's use is recorded first, in a unit of its own."""
        key = proof.jkt if proof is not None else None
        if proof is not None:
            await self.db.transaction(spend_in, proof, single_statement=True)
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
        check_refresh_binding(row.dpop_jkt, key)
        granted = tuple(row.scopes)
        if request.scope is not None:
            if not set(request.scope) <= set(granted):
                raise errors.ScopeInvalid("A refresh may not ask for scopes beyond the grant.")
            granted = request.scope
        audience = resources.audience(request.resources, row.resources)
        if client.public:  # the statement above matched a public app's digest: this app is public
            refresh_token = await self._rotate(row, now)
        # OpenID Connect Core 12.2: the same sub and auth_time as the first ID token; no nonce. Every
        # token keeps the first sign-in's auth_time, amr and acr (contract 19).
        return await self.issuer.issue(Issuance(
            client_id=client.client_id, user_id=row.user_id, asu=row.asu, grant_id=row.grant_id, scopes=granted,
            audience=audience, refresh_token=refresh_token, started=now,
            sign_in=SignIn.remembered(row.auth_time, row.session_id, row.amr), id_token_alg=row.id_token_alg,
            jkt=key))

    async def _rotate(self, row: RefreshToken, now: int) -> str:
        """The presented token retired and its successor stored, or invalid_grant if a concurrent
        refresh (or a revocation) got there first."""
        successor = opaque.new_secret(opaque.REFRESH_TOKEN)
        if not await self.db.transaction(tokens_repo.rotate, row, new_hash=opaque.digest(successor), now=now,
                                         expires_at=now + self.settings.refresh_token_ttl):
            raise errors.RefreshTokenRevoked("This refresh token has been replaced by a newer one.")
        return successor

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

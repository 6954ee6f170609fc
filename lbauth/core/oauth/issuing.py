"""The token endpoint's one issuing step (contract 6, 15, 17): every grant says what it issues in
an `Issuance`, and the `Issuer` mints the access token and runs the registered extensions, such
as OpenID Connect's ID token (core/oidc/id_tokens.py), over the token set.

Grants own their flow (what a code or refresh token allows); what a token says is decided here
and in the extensions only, the same for every grant.
"""

from __future__ import annotations

__all__ = ["Issuance", "Issuer", "SignIn", "TokenExtension"]

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from lbauth.core.crypto import opaque
from lbauth.core.oauth.tokens import AccessTokens, SignIn, TokenSet, new_jti
from lbauth.settings import Settings
from lbauth.storage.db import Database
from lbauth.storage.repo import tokens as tokens_repo


@dataclass(frozen=True, slots=True)
class Issuance:
    """What a grant issues tokens for, whatever the grant: the access token's subject, client,
    grant, scopes and audience, the refresh token that goes with it, and what an OpenID grant's ID
    token needs besides."""
    client_id: str
    user_id: str
    asu: str
    grant_id: str
    scopes: tuple[str, ...]
    audience: str | list[str] | None  # RFC 8707 (contract 17); None: LBAUTH_AUDIENCE
    refresh_token: str  # the one the response carries
    started: int  # when the request began: the `iat`, unless a revocation may have raced it
    jti: str = field(default_factory=new_jti)
    sign_in: SignIn | None = None
    id_token_alg: str | None = None  # the app's ID-token algorithm (a code's: as at its authorization)
    nonce: str | None = None  # the authorization request's: a code's first ID token echoes it
    jkt: str | None = None  # the key of the request's DPoP proof: the access token is bound to it (RFC 9449)


class TokenExtension(Protocol):
    """A part of issuance that applies to some grants only (authlib's grant extensions): it looks
    at the issuance and the token set minted so far and returns the token set it answers with."""

    async def extend(self, issuance: Issuance, token_set: TokenSet, issued_at: int) -> TokenSet:
        ...


class Issuer:
    """Mints the access token of an `Issuance` (RFC 9068, contract 6) and applies the extensions in
    the order they were registered."""

    def __init__(self, db: Database, settings: Settings, tokens: AccessTokens,
                 extensions: Sequence[TokenExtension] = ()) -> None:
        self.db, self.settings, self.tokens, self.extensions = db, settings, tokens, tuple(extensions)

    async def issue(self, issuance: Issuance) -> TokenSet:
        issued_at = await self.tokens.issue_time(issuance.grant_id, issuance.started,
                                                 lambda: self._live(issuance.refresh_token))
        access_token = self.tokens.mint(user_id=issuance.user_id, client_id=issuance.client_id,
                                        scopes=issuance.scopes, grant_id=issuance.grant_id, asu=issuance.asu,
                                        jti=issuance.jti, now=issued_at, audience=issuance.audience,
                                        sign_in=issuance.sign_in, jkt=issuance.jkt)
        token_set = TokenSet(access_token, issuance.refresh_token, self.settings.access_token_ttl, issuance.scopes,
                             token_type="Bearer" if issuance.jkt is None else "DPoP")
        for extension in self.extensions:
            token_set = await extension.extend(issuance, token_set, issued_at)
        return token_set

    async def _live(self, refresh_token: str) -> bool:
        """Is this refresh token still unrevoked? Asked only when a revocation may have raced a request."""
        row = await self.db.read(tokens_repo.by_hash, opaque.digest(refresh_token))
        return row is not None and row.revoked_at is None

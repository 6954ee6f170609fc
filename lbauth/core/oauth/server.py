"""The authorization server: the authorization endpoint (authorization/endpoint.py) and what the
token, revocation and introspection endpoints do, for the specification's envelope endpoints
(spec 4.2, 4.3, 4.4) and the RFC ones (contract 11) alike.

Handlers parse the HTTP request, call one method here and render the answer. Built once per
process, in `Services`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.oauth import authorizations, introspection, revocation_feed, token_revocation
from lbauth.core.oauth.authorization.endpoint import AuthorizationEndpoint
from lbauth.core.oauth.authorizations import Authorization, RevokedAuthorization
from lbauth.core.oauth.checklist import CheckList
from lbauth.core.oauth.client_auth import (
    ClientAuthMethod,
    ClientCredentials,
    ClientSecretBasic,
    ClientSecretPost,
    NoClientSecret,
    checked_client,
    presented_credentials,
)
from lbauth.core.oauth.device import DeviceAuthorizations, DeviceCodeGrant
from lbauth.core.oauth.dpop import DPoPProofs
from lbauth.core.oauth.grants import AuthorizationCodeGrant, GrantType, RefreshTokenGrant
from lbauth.core.oauth.issuing import Issuer
from lbauth.core.oauth.revocation_feed import FeedPage
from lbauth.core.oauth.tokens import AccessTokens, TokenSet
from lbauth.core.oidc import logout
from lbauth.core.oidc.id_tokens import IdTokenExtension, IdTokens
from lbauth.core.registration.documents import ClientDocuments
from lbauth.errors import ClientSecretMismatch, GrantTypeInvalid, LbauthError
from lbauth.settings import Settings
from lbauth.storage.db import Database
from lbauth.storage.records import App, ProvenKey
from lbauth.storage.repo import dpop as dpop_repo
from lbauth.storage.repo import pushed as pushed_repo

CLIENT_AUTH_METHODS: tuple[ClientAuthMethod, ...] = (ClientSecretBasic(), ClientSecretPost(), NoClientSecret())
GRANT_TYPES: tuple[type[GrantType[Any]], ...] = (AuthorizationCodeGrant, RefreshTokenGrant, DeviceCodeGrant)
GRANT_TYPE_NAMES = tuple(cls.grant_type for cls in GRANT_TYPES)  # what a client may register (RFC 7591 2)


class AuthorizationServer:
    """Client authentication methods, grant types and the issuing step's extensions are registries:
    new ones join by construction."""

    def __init__(self, db: Database, clock: Clock, settings: Settings, tokens: AccessTokens, checklist: CheckList,
                 id_tokens: IdTokens, documents: ClientDocuments, *,
                 client_auth_methods: Sequence[ClientAuthMethod] = CLIENT_AUTH_METHODS,
                 grant_types: Sequence[type[GrantType[Any]]] = GRANT_TYPES) -> None:
        self.db, self.clock, self.settings, self.tokens, self.checklist = db, clock, settings, tokens, checklist
        self.client_auth_methods = tuple(client_auth_methods)
        self.issuer = Issuer(db, settings, tokens, extensions=(IdTokenExtension(id_tokens),))
        self.grants = {cls.grant_type: cls(db, clock, settings, checklist, self.issuer) for cls in grant_types}
        self.dpop = DPoPProofs(db, clock)
        self.device = DeviceAuthorizations(db, clock, settings)  # RFC 8628: its endpoint and the user's page
        self.authorization_endpoint = AuthorizationEndpoint(db, clock, settings, documents, lambda: tokens.public_keys)

    # ---- client authentication (RFC 6749 2.3) --------------------------------------------------------

    def client_credentials(self, authorization: str, form: Mapping[str, str]) -> ClientCredentials:
        """The credentials the request presents (its Authorization header, or "", and its form),
        checked for shape only: no database yet, so that rate limits per client come first."""
        return presented_credentials(self.client_auth_methods, authorization, form)

    async def authenticate(self, client: ClientCredentials) -> App:
        """The client's app, if its credentials are right (one statement)."""
        return await self.db.read(checked_client, client.client_id, client.secret_digest)

    # ---- the token endpoint (RFC 6749 3.2) ---------------------------------------------------------------

    def grant(self, grant_type: str) -> GrantType[Any]:
        """The grant type, or unsupported_grant_type: decided before the client is authenticated."""
        grant = self.grants.get(grant_type)
        if grant is None:
            raise GrantTypeInvalid(f"Supported grant types: {', '.join(self.grants)}.")
        return grant

    async def token(self, grant: GrantType[Any], client: ClientCredentials, params: Mapping[str, str],
                    proof: ProvenKey | None = None) -> TokenSet:
        """Tokens for the client under `grant`. The client is authenticated once: inside the grant's
        own statement, or, when the parameters are refused, before that refusal (RFC 6749 5.2: a
        bad client hears invalid_client before any grant error)."""
        try:
            request = grant.parse(params)
        except LbauthError:
            await self.authenticate(client)
            raise
        return await grant.issue(client, request, proof)

    async def forget_ended_requests(self) -> None:
        """Pushed requests, DPoP proofs and device codes too old to be used (a periodic job)."""
        now = int(self.clock.now())
        await self.db.transaction(pushed_repo.delete_ended, now, single_statement=True)
        await self.db.transaction(dpop_repo.delete_ended, now, single_statement=True)
        await self.device.forget_ended()

    # ---- revocation and introspection (RFC 7009, RFC 7662) ------------------------------------------------

    async def revoke(self, client: ClientCredentials, token: str) -> None:
        """RFC 7009 2.1; a public client names itself by its `client_id` and revokes only its own tokens."""
        app = await self.authenticate(client)
        await token_revocation.revoke_token(self.db, self.clock, self.checklist, self.tokens.public_keys, app=app,
                                            token=token, issuer=self.settings.issuer, audience=None,
                                            access_ttl=self.settings.access_token_ttl)

    async def introspect(self, client: ClientCredentials, token: str) -> dict[str, Any]:
        """RFC 7662 2.1: the caller must be authorized to introspect; here, a confidential client
        (contract 17). A public client's id alone proves nothing: anyone can send it."""
        if client.public:
            raise ClientSecretMismatch("Introspection needs a confidential client's credentials.")
        app = await self.authenticate(client)
        return await introspection.introspect(self.db, self.clock, self.tokens.public_keys, app=app, token=token,
                                              issuer=self.settings.issuer, audience=None)

    async def revocations_since(self, since: str | None) -> FeedPage:
        """The check-list for offline verifiers, after the cursor `since` (contract 11)."""
        return await revocation_feed.feed(self.db, self.clock, since)

    # ---- RP-initiated logout (OpenID Connect RP-Initiated Logout 1.0) ------------------------------------

    async def end_session_request(self, params: Mapping[str, Sequence[str]]) -> logout.Logout:
        """What a logout request may do: its app, its checked post-logout redirect URI, its state."""
        return await logout.check(self.db, self.tokens.public_keys, self.settings.issuer, params)

    # ---- the user's own authorizations (contract 7) -------------------------------------------------------

    async def authorizations(self, user_id: str) -> list[Authorization]:
        """The apps the user authorized, with their scopes and when."""
        return await authorizations.list_authorizations(self.db, user_id)

    async def revoke_authorization(self, user_id: str, client_id: str,
                                   source: audit.Source = audit.NO_SOURCE) -> RevokedAuthorization:
        """The user revokes an app: its grant, tokens and codes, and the webhook event."""
        return await authorizations.revoke_authorization(self.db, self.clock, self.checklist, user_id=user_id,
                                                         client_id=client_id,
                                                         access_ttl=self.settings.access_token_ttl, source=source)

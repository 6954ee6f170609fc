"""Dynamic client registration (RFC 7591) with RFC 7592 read and delete (contract 17).

A client posts its metadata and becomes an app with no owner (`registration` dynamic): public
(`token_endpoint_auth_method` none, no secret) or confidential (a client secret, shown this once).
It gets a registration access token with which it may read its registration and delete it.

Decisions the contract leaves open:
- `scope` is the app's default for a request without `scope`, never a ceiling: a self-registered
  app may ask for every scope (the MCP SDKs widen scopes on step-up without registering again).
  Values this server does not know are ignored, not refused.
- `grant_types` may hold the token endpoint's grant types, `authorization_code` among them;
  `response_types` only `code`. Every grant gets a refresh token whatever `grant_types` says.
- Fields RFC 7591 defines that this server does not use (`contacts`, `jwks_uri`, `software_id`...)
  are ignored, as RFC 7591 2 asks of unknown ones, and not echoed.
- A read (RFC 7592 2.1) does not show the client secret again: only its digest is kept.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from typing import Any

from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.clients import metadata
from lbauth.core.crypto import opaque
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.core.oauth.checklist import cover_racing_tokens
from lbauth.core.oauth.grant_revocation import suspend_grant_in
from lbauth.core.registration import initial_tokens
from lbauth.errors import ClientMetadataInvalid, RedirectUriInvalid, TokenInvalid
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import App, ClientMetadata, Registration
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import registration as repo
from lbauth.verify import CheckList

DEFAULT_NAME = "Unnamed app (registered itself)"
MAX_REDIRECT_URIS = 20
_DUMMY_DIGEST = opaque.digest("lbauth: no such registration")


def intake(auth_methods: Sequence[str], grant_types: Sequence[str]) -> metadata.Intake:
    """A self-registered client: the server's client authentication methods (RFC 7591 2 default
    `client_secret_basic`) and grant types. Development allows no more redirect URIs than
    production: strangers register here."""
    return metadata.Intake(Registration.DYNAMIC, auth_methods=tuple(auth_methods),
                           default_auth_method="client_secret_basic", grant_types=tuple(grant_types),
                           development=False, default_name=DEFAULT_NAME, max_redirect_uris=MAX_REDIRECT_URIS)


def client_information(app: App, base_url: str) -> dict[str, Any]:
    """RFC 7591 3.2.1 / RFC 7592 3: every registered field, without the secrets."""
    client = ClientMetadata.of(app)
    information: dict[str, Any] = {
        "client_id": app.client_id,
        "client_id_issued_at": app.created_at,
        "redirect_uris": client.redirect_uris,
        "grant_types": client.grant_types,
        "response_types": client.response_types,
        "token_endpoint_auth_method": client.token_endpoint_auth_method,
        "client_name": client.name,
        "scope": " ".join(app.default_scopes),
        "application_type": client.application_type,
        "require_pushed_authorization_requests": client.require_pushed_authorization_requests,  # RFC 9126 6
        "dpop_bound_access_tokens": client.dpop_bound_access_tokens,  # RFC 9449 5.2
        "registration_client_uri": registration_client_uri(base_url, app.client_id),
    }
    for optional in ("client_uri", "logo_uri"):
        if getattr(client, optional):
            information[optional] = getattr(client, optional)
    return information


def registration_client_uri(base_url: str, client_id: str) -> str:
    return f"{base_url}/oauth/register/{client_id}"


def _registered(conn: Connection, client_id: str, access_token: str) -> App:
    """RFC 7592 2: the app this registration access token manages; TokenInvalid (401) otherwise,
    alike for an unknown client and a wrong token, after the same constant-time comparison."""
    app = apps_repo.by_client_id(conn, client_id)
    stored = app.registration_token_hash if app is not None and app.registration == Registration.DYNAMIC else None
    presented = opaque.digest(access_token) if isinstance(access_token, str) else ""
    if not hmac.compare_digest(presented, stored or _DUMMY_DIGEST) or app is None or stored is None:
        raise TokenInvalid("The registration access token is invalid for this client.")
    return app


class DynamicRegistration:
    """The registration endpoint (RFC 7591 3) and the client configuration endpoint (RFC 7592)."""

    def __init__(self, db: Database, clock: Clock, master_keys: Callable[[], MasterKeys], checklist: CheckList,
                 client_intake: metadata.Intake, *, base_url: str, access_ttl: int) -> None:
        self.db, self.clock, self.master_keys, self.checklist = db, clock, master_keys, checklist
        self.intake, self.base_url, self.access_ttl = client_intake, base_url, access_ttl

    async def check_initial_token(self, token: str) -> None:
        """LBAUTH_REGISTRATION `token`: TokenInvalid (401) unless `token` is a live initial access token."""
        await initial_tokens.check(self.db, self.clock, token)

    def parse(self, document: Any) -> ClientMetadata:
        """RFC 7591 2 and 3.2.2: the metadata of a registration request, or ClientMetadataInvalid
        (RedirectUriInvalid for a redirect URI) naming what is wrong."""
        if not isinstance(document, dict):
            raise ClientMetadataInvalid("The registration request must be a JSON object.")
        try:
            return metadata.validate(document, self.intake)
        except metadata.MetadataRefused as refused:
            error = RedirectUriInvalid if refused.field == "redirect_uris" else ClientMetadataInvalid
            raise error(refused.message().rstrip(".") + ".") from None

    async def register(self, client: ClientMetadata, source: audit.Source = audit.NO_SOURCE) -> dict[str, Any]:
        """RFC 7591 3.2.1: the new app's client information, with its registration access token (RFC
        7592 3) and, for a confidential client, its secret: both shown this once, kept as digests."""
        client_id = opaque.new_id("cid_")
        access_token = opaque.new_secret(opaque.REGISTRATION_ACCESS_TOKEN)

        def work(conn: Connection) -> tuple[App, str | None]:
            now = int(self.clock.now())
            created = metadata.insert(conn, self.master_keys(), client, client_id=client_id, now=now,
                                      registration_token=access_token)
            audit.record(conn, now, audit.EventType.CLIENT_REGISTERED, audit.Actor.client(client_id), source=source,
                         detail={"clientId": client_id, "app": client.name, "via": Registration.DYNAMIC})
            app = apps_repo.by_client_id(conn, client_id)
            assert app is not None  # inserted just now, in this transaction
            return app, created.client_secret

        app, secret = await self.db.transaction(work)
        information = client_information(app, self.base_url)
        information["registration_access_token"] = access_token
        if secret is not None:
            information["client_secret"] = secret
            information["client_secret_expires_at"] = 0  # RFC 7591 3.2.1: never expires
        return information

    async def read(self, client_id: str, access_token: str) -> dict[str, Any]:
        """RFC 7592 2.1."""
        return client_information(await self.db.read(_registered, client_id, access_token), self.base_url)

    async def delete(self, client_id: str, access_token: str) -> None:
        """RFC 7592 2.3: the app is deleted, and with it its grants, codes and refresh tokens; its
        grants go on the revocation check-list, so the access tokens already issued stop working."""
        db, clock, checklist, access_ttl = self.db, self.clock, self.checklist, self.access_ttl
        now = int(clock.now())

        def work(conn: Connection) -> Sequence[str]:
            app = _registered(conn, client_id, access_token)
            grant_ids = repo.live_grant_ids_of_app(conn, app.id)
            for grant_id in grant_ids:
                suspend_grant_in(conn, clock, grant_id, now, access_ttl)
            repo.delete_app(conn, app.id)
            changes_repo.notify(conn)
            return grant_ids

        for grant_id in await db.transaction(work):
            await cover_racing_tokens(db, clock, checklist, grant_id, now, access_ttl)

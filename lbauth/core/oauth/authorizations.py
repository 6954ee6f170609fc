"""A user's authorizations (contract section 7): the apps they granted access to, and revoking one."""

from __future__ import annotations

from dataclasses import dataclass

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.oauth.checklist import CheckList, cover_racing_tokens
from lbauth.core.oauth.grant_revocation import revoke_grant_in
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import grants as grants_repo


@dataclass(frozen=True)
class Authorization:
    """A live grant of the user's to an app."""
    app_id: str
    client_id: str
    app_name: str
    scopes: tuple[str, ...]
    granted_at: int


@dataclass(frozen=True)
class RevokedAuthorization:
    """The user revoked an app: when, and the id of the `authorization.revoked` event it was sent."""
    client_id: str
    revoked_at: int
    event_id: str


async def list_authorizations(db: Database, user_id: str) -> list[Authorization]:
    return [Authorization(g.app_id, g.client_id, g.app_name, tuple(g.scopes), g.created_at)
            for g in await db.read(grants_repo.live_grants_of_user, user_id)]


async def revoke_authorization(db: Database, clock: Clock, checklist: CheckList, *, user_id: str, client_id: str,
                               access_ttl: int, source: audit.Source = audit.NO_SOURCE) -> RevokedAuthorization:
    """In one transaction: the grant, its open codes (first) and refresh tokens revoked, its id on
    the check-list until its access tokens expire, the event in the webhook outbox. The order:
    docs/architecture.md, "Revocation races"."""
    now = int(clock.now())

    def work(conn: Connection) -> tuple[str, str]:
        app = apps_repo.by_client_id(conn, client_id) if isinstance(client_id, str) else None
        grant = grants_repo.live_grant(conn, user_id, app.id) if app is not None else None
        if app is None or grant is None:
            raise errors.AuthorizationNotFound()
        event_id = revoke_grant_in(conn, clock, app, grant.id, user_id, now, access_ttl)
        if event_id is None:
            raise errors.AuthorizationNotFound()
        audit.record(conn, now, audit.EventType.AUTHORIZATION_REVOKED, audit.Actor.user(user_id), source=source,
                     detail={"clientId": app.client_id, "app": app.name})
        changes_repo.notify(conn)
        return event_id, grant.id
    event_id, grant_id = await db.transaction(work)
    await cover_racing_tokens(db, clock, checklist, grant_id, now, access_ttl)
    return RevokedAuthorization(client_id, now, event_id)

"""Grants (one live grant per user and app) and app-scoped user ids."""

from __future__ import annotations

from sqlalchemy import Connection, insert, select, update

from lbauth.storage.models import apps, grants, subjects, users
from lbauth.storage.records import Grant, UserGrant
from lbauth.storage.repo import duplicate_refused, shaped

_LIVE = shaped(Grant, select(grants, subjects.c.asu)
               .outerjoin(subjects, (subjects.c.app_id == grants.c.app_id) & (subjects.c.user_id == grants.c.user_id))
               .where(grants.c.revoked_at.is_(None)))
# PostgreSQL: as a code is issued under a live grant (repo/codes.py), the user's row, then the
# grant's, share-locked: a revocation, disable or deletion under way is waited for and then seen.
_LIVE_LOCKED = (_LIVE.join(users, users.c.id == grants.c.user_id).where(users.c.disabled_at.is_(None))
                .with_for_update(read=True, of=[users, grants]))
_OF_USER = shaped(UserGrant, select(grants, apps.c.client_id, apps.c.name.label("app_name"))
                  .join(apps, apps.c.id == grants.c.app_id)
                  .where(grants.c.revoked_at.is_(None))
                  .order_by(grants.c.created_at))


def live_grant(conn: Connection, user_id: str, app_id: str) -> Grant | None:
    """The live grant and the app-scoped id of (user, app), in one statement."""
    row = conn.execute(_LIVE.where(grants.c.user_id == user_id, grants.c.app_id == app_id)).first()
    return Grant(*row) if row is not None else None


def live_grant_locked(conn: Connection, user_id: str, app_id: str) -> Grant | None:
    """The live grant of (user, app) and its app-scoped id, locked as `_LIVE_LOCKED` says; None
    when there is none or the user is disabled."""
    row = conn.execute(_LIVE_LOCKED.where(grants.c.user_id == user_id, grants.c.app_id == app_id)).first()
    return Grant(*row) if row is not None else None


def subject(conn: Connection, user_id: str, app_id: str) -> str | None:
    return conn.execute(select(subjects.c.asu).where(subjects.c.user_id == user_id,
                                                     subjects.c.app_id == app_id)).scalar()


def insert_subject(conn: Connection, *, app_id: str, user_id: str, asu: str, now: int) -> None:
    """Raises Duplicate when a concurrent approval made the (app, user) id first."""
    with duplicate_refused("subject"):
        conn.execute(insert(subjects).values(app_id=app_id, user_id=user_id, asu=asu, created_at=now))


def insert_grant(conn: Connection, *, grant_id: str, app_id: str, user_id: str, scopes: list[str], now: int,
                 resources: list[str] | None = None) -> None:
    """Raises Duplicate when a concurrent approval made the live grant of (user, app) first."""
    with duplicate_refused("grant"):
        conn.execute(insert(grants).values(id=grant_id, app_id=app_id, user_id=user_id, scopes=scopes,
                                           created_at=now, updated_at=now, resources=resources or []))


def set_scopes(conn: Connection, grant_id: str, scopes: list[str], now: int,
               resources: list[str] | None = None) -> None:
    """The grant's scopes, and its resources (RFC 8707) when given."""
    values: dict[str, object] = {"scopes": scopes, "updated_at": now}
    if resources is not None:
        values["resources"] = resources
    conn.execute(update(grants).where(grants.c.id == grant_id).values(**values))


def live_grants_of_user(conn: Connection, user_id: str) -> list[UserGrant]:
    return [UserGrant(*row) for row in conn.execute(_OF_USER.where(grants.c.user_id == user_id))]


def revoke_grant(conn: Connection, grant_id: str, now: int) -> bool:
    result = conn.execute(update(grants).where(grants.c.id == grant_id, grants.c.revoked_at.is_(None))
                          .values(revoked_at=now))
    return result.rowcount == 1

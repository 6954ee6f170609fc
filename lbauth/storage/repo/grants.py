"""Grants (one live grant per user and app) and app-scoped user ids."""

from __future__ import annotations

from sqlalchemy import Connection, Row, insert, select, update

from lbauth.storage.models import apps, grants, subjects


def live_grant(conn: Connection, user_id: str, app_id: str) -> Row | None:
    """The live grant and the app-scoped id of (user, app), in one statement."""
    query = (select(grants, subjects.c.asu)
             .outerjoin(subjects, (subjects.c.app_id == grants.c.app_id) & (subjects.c.user_id == grants.c.user_id))
             .where(grants.c.user_id == user_id, grants.c.app_id == app_id, grants.c.revoked_at.is_(None)))
    return conn.execute(query).first()


def subject(conn: Connection, user_id: str, app_id: str) -> str | None:
    return conn.execute(select(subjects.c.asu).where(subjects.c.user_id == user_id,
                                                     subjects.c.app_id == app_id)).scalar()


def insert_subject(conn: Connection, **values: object) -> None:
    conn.execute(insert(subjects).values(**values))


def insert_grant(conn: Connection, **values: object) -> None:
    conn.execute(insert(grants).values(**values))


def set_scopes(conn: Connection, grant_id: str, scopes: list[str], now: int) -> None:
    conn.execute(update(grants).where(grants.c.id == grant_id).values(scopes=scopes, updated_at=now))


def live_grants_of_user(conn: Connection, user_id: str) -> list[Row]:
    query = (select(grants, apps.c.client_id, apps.c.name.label("app_name"))
             .join(apps, apps.c.id == grants.c.app_id)
             .where(grants.c.user_id == user_id, grants.c.revoked_at.is_(None))
             .order_by(grants.c.created_at))
    return list(conn.execute(query))


def revoke_grant(conn: Connection, grant_id: str, now: int) -> bool:
    result = conn.execute(update(grants).where(grants.c.id == grant_id, grants.c.revoked_at.is_(None))
                          .values(revoked_at=now))
    return result.rowcount == 1

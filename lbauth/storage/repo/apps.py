"""Registered applications."""

from __future__ import annotations

from sqlalchemy import Connection, Row, bindparam, insert, select, update

from lbauth.storage.models import apps, users

_WITH_OWNER = select(apps, users.c.email.label("owner_email")).join(users, users.c.id == apps.c.owner_id)
_BY_CLIENT_ID = _WITH_OWNER.where(apps.c.client_id == bindparam("client_id"))  # built once: see repo/codes.py


def insert_app(conn: Connection, **values: object) -> None:
    conn.execute(insert(apps).values(**values))


def by_client_id(conn: Connection, client_id: str) -> Row | None:
    return conn.execute(_BY_CLIENT_ID, {"client_id": client_id}).first()


def all_apps(conn: Connection, owner_id: str | None = None) -> list[Row]:
    query = _WITH_OWNER.order_by(apps.c.created_at, apps.c.id)
    if owner_id is not None:
        query = query.where(apps.c.owner_id == owner_id)
    return list(conn.execute(query))


def update_app(conn: Connection, app_id: str, **values: object) -> None:
    conn.execute(update(apps).where(apps.c.id == app_id).values(**values))

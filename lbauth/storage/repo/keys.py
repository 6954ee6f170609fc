"""Signing keys."""

from __future__ import annotations

from sqlalchemy import Connection, Row, insert, select, update

from lbauth.storage.models import signing_keys

PUBLISHED_STATES = ("staged", "active", "retiring")


def insert_key(conn: Connection, **values: object) -> None:
    conn.execute(insert(signing_keys).values(**values))


def published(conn: Connection) -> list[Row]:
    """Every key that may still verify a live token, the signing key first."""
    rows = conn.execute(select(signing_keys).where(signing_keys.c.state.in_(PUBLISHED_STATES))
                        .order_by(signing_keys.c.created_at))
    return sorted(rows, key=lambda r: (r.state != "active", r.created_at))


def all_keys(conn: Connection) -> list[Row]:
    return list(conn.execute(select(signing_keys).order_by(signing_keys.c.created_at)))


def update_key(conn: Connection, kid: str, **values: object) -> None:
    conn.execute(update(signing_keys).where(signing_keys.c.kid == kid).values(**values))

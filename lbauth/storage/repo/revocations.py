"""The revocation check-list as stored: the feed every process and verifier reads by cursor."""

from __future__ import annotations

from sqlalchemy import Connection, Row, insert, select

from lbauth.storage.models import revocations


def insert_revocation(conn: Connection, **values: object) -> None:
    conn.execute(insert(revocations).values(**values))


def since(conn: Connection, cursor: int, now: int, limit: int = 10_000) -> list[Row]:
    """Live entries after `cursor`, oldest first."""
    query = (select(revocations).where(revocations.c.id > cursor, revocations.c.expires_at > now)
             .order_by(revocations.c.id).limit(limit))
    return list(conn.execute(query))

"""The revocation check-list as stored: the feed every process and verifier reads by cursor."""

from __future__ import annotations

from sqlalchemy import Connection, Row, and_, exists, insert, or_, select

from lbauth.storage.models import revocations

PAGE = 1000


def insert_revocation(conn: Connection, **values: object) -> None:
    conn.execute(insert(revocations).values(**values))


def since(conn: Connection, cursor: int, now: int) -> list[Row]:
    """Up to PAGE live entries after `cursor`, oldest first."""
    query = (select(revocations).where(revocations.c.id > cursor, revocations.c.expires_at > now)
             .order_by(revocations.c.id).limit(PAGE))
    return list(conn.execute(query))


def covers(conn: Connection, grant_id: str | None, jti: str, issued_at: int, now: int) -> bool:
    """Is an access token with these ids, issued at `issued_at`, on the check-list?"""
    by_grant = and_(revocations.c.grant_id == grant_id, revocations.c.revoked_at >= issued_at) \
        if grant_id else revocations.c.id.is_(None)
    query = select(exists().where(revocations.c.expires_at > now, or_(revocations.c.jti == jti, by_grant)))
    return bool(conn.execute(query).scalar())

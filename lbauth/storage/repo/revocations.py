"""The revocation check-list as stored: the feed every process and verifier reads by cursor."""

from __future__ import annotations

from sqlalchemy import Connection, Row, and_, exists, insert, or_, select, text

from lbauth.storage.models import revocations

PAGE = 1000
# Every reader follows the list by id (a cursor). PostgreSQL hands out an id at INSERT and shows the
# row at COMMIT, so of two revocations under way the later id could commit first, and a reader that
# saw it would move its cursor past the other and never see that one: a process, or an offline
# verifier, would accept a revoked grant's tokens until it restarts. Taken before the insert and
# held to the commit, this lock makes the commit order the id order. SQLite: BEGIN IMMEDIATE does.
_IN_ID_ORDER = text("SELECT pg_advisory_xact_lock(7009010901)")


def insert_revocation(conn: Connection, **values: object) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(_IN_ID_ORDER)
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

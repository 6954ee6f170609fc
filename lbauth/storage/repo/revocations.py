"""The revocation check-list as stored: the feed every process and verifier reads by cursor."""

from __future__ import annotations

from sqlalchemy import Connection, and_, exists, insert, or_, select, text

from lbauth.storage.models import revocations
from lbauth.storage.records import Revocation
from lbauth.storage.repo import shaped

PAGE = 1000
NOTIFY_CHANNEL = "lbauth_revocations"
# Every reader follows the list by id (a cursor). PostgreSQL hands out an id at INSERT and shows the
# row at COMMIT, so of two revocations under way the later id could commit first, and a reader that
# saw it would move its cursor past the other and never see that one: a process, or an offline
# verifier, would accept a revoked grant's tokens until it restarts. Taken before the insert and
# held to the commit, this lock makes the commit order the id order. SQLite: BEGIN IMMEDIATE does.
_IN_ID_ORDER = text("SELECT pg_advisory_xact_lock(7009010901)")
_NOTIFY = text("SELECT pg_notify(:channel, '')")
_SINCE = shaped(Revocation, select(revocations))


def insert_revocation(conn: Connection, *, grant_id: str | None = None, jti: str | None = None,
                      session_id: str | None = None, user_id: str | None = None, revoked_at: int,
                      expires_at: int) -> None:
    """An entry for a grant (every token of it issued at or before `revoked_at`), one access token,
    an ended session, or a user whose account changed (exactly one of the four)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_IN_ID_ORDER)
    conn.execute(insert(revocations).values(grant_id=grant_id, jti=jti, session_id=session_id, user_id=user_id,
                                            revoked_at=revoked_at, expires_at=expires_at))


def notify(conn: Connection) -> None:
    """Wake every process's listener when this transaction commits (PostgreSQL LISTEN/NOTIFY)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_NOTIFY, {"channel": NOTIFY_CHANNEL})


def since(conn: Connection, cursor: int, now: int, *, published: bool = False) -> list[Revocation]:
    """Up to PAGE live entries after `cursor`, oldest first; `published`: only the grant and token
    entries offline verifiers read (session and user entries are for this server's processes)."""
    query = _SINCE.where(revocations.c.id > cursor, revocations.c.expires_at > now)
    if published:
        query = query.where(or_(revocations.c.grant_id.is_not(None), revocations.c.jti.is_not(None)))
    query = query.order_by(revocations.c.id).limit(PAGE)
    return [Revocation(*row) for row in conn.execute(query)]


def covers(conn: Connection, grant_id: str | None, jti: str, issued_at: int, now: int) -> bool:
    """Is an access token with these ids, issued at `issued_at`, on the check-list?"""
    by_grant = and_(revocations.c.grant_id == grant_id, revocations.c.revoked_at >= issued_at) \
        if grant_id else revocations.c.id.is_(None)
    query = select(exists().where(revocations.c.expires_at > now, or_(revocations.c.jti == jti, by_grant)))
    return bool(conn.execute(query).scalar())

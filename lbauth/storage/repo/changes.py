"""The change feed as stored (contract sections 7 and 16): what every process, and every offline
verifier, must learn in the order it happened, read by cursor. A grant or an access token revoked
(the revocation check-list, published to verifiers); a session ended or a user changed (for this
server's own processes)."""

from __future__ import annotations

from sqlalchemy import Connection, and_, exists, insert, or_, select, text

from lbauth.storage.models import changes
from lbauth.storage.records import Change
from lbauth.storage.repo import shaped

PAGE = 1000
NOTIFY_CHANNEL = "lbauth_changes"
# Every reader follows the feed by id (a cursor). PostgreSQL hands out an id at INSERT and shows the
# row at COMMIT, so of two changes under way the later id could commit first, and a reader that saw
# it would move its cursor past the other and never see that one: a process, or an offline
# verifier, would accept a revoked grant's tokens until it restarts. Taken before the insert and
# held to the commit, this lock makes the commit order the id order. SQLite: BEGIN IMMEDIATE does.
_IN_ID_ORDER = text("SELECT pg_advisory_xact_lock(7009010901)")
_NOTIFY = text("SELECT pg_notify(:channel, '')")
_SINCE = shaped(Change, select(changes))


def grant_revoked(conn: Connection, grant_id: str, *, at: int, expires_at: int) -> None:
    """Every access token of the grant issued at or before `at` is refused."""
    _append(conn, grant_id=grant_id, changed_at=at, expires_at=expires_at)


def token_revoked(conn: Connection, jti: str, *, at: int, expires_at: int) -> None:
    """One access token is refused."""
    _append(conn, jti=jti, changed_at=at, expires_at=expires_at)


def session_ended(conn: Connection, session_id: str, *, at: int, expires_at: int) -> None:
    _append(conn, session_id=session_id, changed_at=at, expires_at=expires_at)


def user_changed(conn: Connection, user_id: str, *, at: int, expires_at: int) -> None:
    _append(conn, user_id=user_id, changed_at=at, expires_at=expires_at)


def _append(conn: Connection, **values: str | int) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(_IN_ID_ORDER)
    conn.execute(insert(changes).values(**values))


def notify(conn: Connection) -> None:
    """Wake every process's listener when this transaction commits (PostgreSQL LISTEN/NOTIFY)."""
    if conn.dialect.name == "postgresql":
        conn.execute(_NOTIFY, {"channel": NOTIFY_CHANNEL})


def since(conn: Connection, cursor: int, now: int, *, published: bool = False) -> list[Change]:
    """Up to PAGE live entries after `cursor`, oldest first; `published`: only the grant and token
    entries offline verifiers read (session and user entries are for this server's processes)."""
    query = _SINCE.where(changes.c.id > cursor, changes.c.expires_at > now)
    if published:
        query = query.where(or_(changes.c.grant_id.is_not(None), changes.c.jti.is_not(None)))
    query = query.order_by(changes.c.id).limit(PAGE)
    return [Change(*row) for row in conn.execute(query)]


def covers(conn: Connection, grant_id: str | None, jti: str, issued_at: int, now: int) -> bool:
    """Is an access token with these ids, issued at `issued_at`, on the check-list?"""
    by_grant = and_(changes.c.grant_id == grant_id, changes.c.changed_at >= issued_at) \
        if grant_id else changes.c.id.is_(None)
    query = select(exists().where(changes.c.expires_at > now, or_(changes.c.jti == jti, by_grant)))
    return bool(conn.execute(query).scalar())

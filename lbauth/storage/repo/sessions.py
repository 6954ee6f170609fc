"""Server-side sessions (contract section 16), by id and by their credential's digest."""

from __future__ import annotations

from dataclasses import fields

from sqlalchemy import Connection, bindparam, insert, select, update

from lbauth.storage.models import sessions, users
from lbauth.storage.records import Session, User
from lbauth.storage.repo import shaped

_ALL = shaped(Session, select(sessions))
# A session and its user in one statement (the first request a process sees with a credential).
_WITH_USER = (select(sessions, users).join(users, users.c.id == sessions.c.user_id)
              .where(sessions.c.token_hash == bindparam("token_hash")))
_SESSION_COLUMNS = len(fields(Session))
_LIVE = (sessions.c.ended_at.is_(None), sessions.c.expires_at > bindparam("now"))


def insert_session(conn: Connection, session: Session) -> None:
    conn.execute(insert(sessions).values({f.name: getattr(session, f.name) for f in fields(session)}))


_STILL_AS_CHECKED = (select(users.c.id)
                     .where(users.c.id == bindparam("user_id"), users.c.password_hash == bindparam("password_hash"),
                            users.c.disabled_at.is_(None), users.c.deleted_at.is_(None))
                     .with_for_update(read=True))


def insert_if_user_unchanged(conn: Connection, session: Session, password_hash: str) -> bool:
    """Open the session only if its user may still sign in with the password just checked: not
    disabled, deleted or given a new password since it was read. The user's row is share-locked
    (PostgreSQL; SQLite writes one at a time), so a disable, deletion or password change under way
    either is seen here or waits for this insert and then ends the session it finds."""
    if conn.execute(_STILL_AS_CHECKED, {"user_id": session.user_id, "password_hash": password_hash}).first() is None:
        return False
    insert_session(conn, session)
    return True


def with_user(conn: Connection, token_hash: str) -> tuple[Session, User] | None:
    """The session a credential names, ended or not, and its user."""
    row = conn.execute(_WITH_USER, {"token_hash": token_hash}).first()
    if row is None:
        return None
    return Session(*row[:_SESSION_COLUMNS]), User(*row[_SESSION_COLUMNS:])


def live_of_user(conn: Connection, user_id: str, now: int) -> list[Session]:
    """The user's live sessions, the most recently used first."""
    query = (_ALL.where(sessions.c.user_id == user_id, *_LIVE)
             .order_by(sessions.c.last_used_at.desc(), sessions.c.created_at.desc(), sessions.c.id))
    return [Session(*row) for row in conn.execute(query, {"now": now})]


def touch(conn: Connection, session_id: str, now: int, every: int) -> None:
    """Record a use, at most once per `every` seconds (contract 16: lastUsedAt)."""
    conn.execute(update(sessions).where(sessions.c.id == session_id, sessions.c.last_used_at <= now - every)
                 .values(last_used_at=now))


def end(conn: Connection, session_ids: list[str], now: int) -> list[str]:
    """End these live sessions; the ids of those this call ended. An ended session keeps no user
    agent or address: nobody is shown it again, so that personal data has no use left."""
    if not session_ids:
        return []
    result = conn.execute(update(sessions).where(sessions.c.id.in_(session_ids), sessions.c.ended_at.is_(None))
                          .values(ended_at=now, user_agent="", ip_address="").returning(sessions.c.id))
    return [row[0] for row in result]


def live_ids(conn: Connection, user_id: str, now: int, *, except_id: str | None = None) -> list[str]:
    query = select(sessions.c.id).where(sessions.c.user_id == user_id, *_LIVE)
    if except_id is not None:
        query = query.where(sessions.c.id != except_id)
    return [row[0] for row in conn.execute(query, {"now": now})]


def erase_details(conn: Connection, user_id: str) -> None:
    """A deleted account's sessions keep no user agent or address (personal data)."""
    conn.execute(update(sessions).where(sessions.c.user_id == user_id).values(user_agent="", ip_address=""))

"""Users and their login sessions (user tokens)."""

from __future__ import annotations

from sqlalchemy import Connection, Row, bindparam, insert, select, update

from lbauth.storage.models import user_tokens, users

# Hot paths (every /me and every API authorization), built once: see repo/codes.py.
_BY_ID = select(users).where(users.c.id == bindparam("user_id"))
_FOR_TOKEN = (select(users).join(user_tokens, user_tokens.c.user_id == users.c.id)
              .where(user_tokens.c.token_hash == bindparam("token_hash"), user_tokens.c.revoked_at.is_(None),
                     user_tokens.c.expires_at > bindparam("now")))


def insert_user(conn: Connection, **values: object) -> None:
    conn.execute(insert(users).values(**values))


def by_email(conn: Connection, email: str) -> Row | None:
    return conn.execute(select(users).where(users.c.email == email)).first()


def by_id(conn: Connection, user_id: str) -> Row | None:
    return conn.execute(_BY_ID, {"user_id": user_id}).first()


def insert_token(conn: Connection, **values: object) -> None:
    conn.execute(insert(user_tokens).values(**values))


def user_for_token(conn: Connection, token_hash: str, now: int) -> Row | None:
    """The user behind a live user token, in one statement."""
    return conn.execute(_FOR_TOKEN, {"token_hash": token_hash, "now": now}).first()


def revoke_token(conn: Connection, token_hash: str, now: int) -> None:
    conn.execute(update(user_tokens).where(user_tokens.c.token_hash == token_hash,
                                           user_tokens.c.revoked_at.is_(None)).values(revoked_at=now))

"""Users and their login sessions (user tokens)."""

from __future__ import annotations

from dataclasses import fields

from sqlalchemy import Connection, bindparam, insert, select, update

from lbauth.storage.models import user_tokens, users
from lbauth.storage.records import User
from lbauth.storage.repo import duplicate_refused, shaped

# Hot paths (every /me and every API authorization), built once: see repo/codes.py.
_ALL = shaped(User, select(users))
_BY_ID = _ALL.where(users.c.id == bindparam("user_id"))
_FOR_TOKEN = (_ALL.join(user_tokens, user_tokens.c.user_id == users.c.id)
              .where(user_tokens.c.token_hash == bindparam("token_hash"), user_tokens.c.revoked_at.is_(None),
                     user_tokens.c.expires_at > bindparam("now")))


def insert_user(conn: Connection, user: User) -> None:
    """Raises Duplicate when the email is taken."""
    with duplicate_refused("user"):
        conn.execute(insert(users).values({f.name: getattr(user, f.name) for f in fields(user)}))


def by_email(conn: Connection, email: str) -> User | None:
    row = conn.execute(_ALL.where(users.c.email == email)).first()
    return User(*row) if row is not None else None


def by_id(conn: Connection, user_id: str) -> User | None:
    row = conn.execute(_BY_ID, {"user_id": user_id}).first()
    return User(*row) if row is not None else None


def insert_token(conn: Connection, *, token_hash: str, user_id: str, now: int, expires_at: int) -> None:
    conn.execute(insert(user_tokens).values(token_hash=token_hash, user_id=user_id, created_at=now,
                                            expires_at=expires_at))


def user_for_token(conn: Connection, token_hash: str, now: int) -> User | None:
    """The user behind a live user token, in one statement."""
    row = conn.execute(_FOR_TOKEN, {"token_hash": token_hash, "now": now}).first()
    return User(*row) if row is not None else None


def revoke_token(conn: Connection, token_hash: str, now: int) -> None:
    conn.execute(update(user_tokens).where(user_tokens.c.token_hash == token_hash,
                                           user_tokens.c.revoked_at.is_(None)).values(revoked_at=now))

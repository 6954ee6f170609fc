"""Users (contract sections 4 and 16): accounts, their profile, status and erasure."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import fields

from sqlalchemy import Connection, bindparam, func, insert, select, update

from lbauth.storage.models import users
from lbauth.storage.records import User
from lbauth.storage.repo import duplicate_refused, shaped

_ALL = shaped(User, select(users))
_BY_ID = _ALL.where(users.c.id == bindparam("user_id"))


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


_ACTIVE_LOCKED = (select(users.c.id)
                  .where(users.c.id == bindparam("user_id"), users.c.disabled_at.is_(None),
                         users.c.deleted_at.is_(None))
                  .with_for_update(read=True))


def lock_if_active(conn: Connection, user_id: str) -> bool:
    """Is the user neither disabled nor deleted? Their row is share-locked to the end of the
    transaction (PostgreSQL; SQLite writes one at a time): a disable or deletion under way is
    waited for and then seen, or waits for this transaction and then sees what it wrote."""
    return conn.execute(_ACTIVE_LOCKED, {"user_id": user_id}).first() is not None


_LOCK_FOR_CHANGE = select(users.c.id).where(users.c.id == bindparam("user_id")).with_for_update(key_share=True)


def lock_for_change(conn: Connection, user_id: str) -> None:
    """Before changing what the user's sessions and grants may do (deletion): FOR NO KEY UPDATE
    waits out, and holds off, the share locks of `lock_if_active` (PostgreSQL), not the foreign
    key checks of the inserts that name the user (a token exchange under way is not held up)."""
    conn.execute(_LOCK_FOR_CHANGE, {"user_id": user_id})


def listed(conn: Connection) -> list[User]:
    """Every account not deleted, oldest first, then by email (the operators' `lbauth users list`)."""
    query = _ALL.where(users.c.deleted_at.is_(None)).order_by(users.c.created_at, users.c.email)
    return [User(*row) for row in conn.execute(query)]


def update_profile(conn: Connection, user_id: str, *, name: str, avatar: str, bio: str,
                   interest_tags: Sequence[str]) -> None:
    conn.execute(update(users).where(users.c.id == user_id, users.c.deleted_at.is_(None))
                 .values(name=name, avatar=avatar, bio=bio, interest_tags=list(interest_tags)))


def set_password_hash(conn: Connection, user_id: str, password_hash: str) -> None:
    conn.execute(update(users).where(users.c.id == user_id, users.c.deleted_at.is_(None))
                 .values(password_hash=password_hash))


def set_disabled(conn: Connection, user_id: str, disabled_at: int | None) -> None:
    """Disable (a time) or enable (None) an account; a disabled one keeps its first time."""
    where = users.c.disabled_at.is_(None) if disabled_at is not None else users.c.disabled_at.is_not(None)
    conn.execute(update(users).where(users.c.id == user_id, users.c.deleted_at.is_(None), where)
                 .values(disabled_at=disabled_at))


def erase(conn: Connection, user_id: str, now: int) -> bool:
    """Contract 16: name, email, avatar, bio, tags and password hash gone; the email freed (the
    unique column keeps a placeholder no address can equal: `usr_...@deleted.invalid`, RFC 2606).
    The row stays, with its id and times, for the grants, codes and events that name it."""
    result = conn.execute(update(users).where(users.c.id == user_id, users.c.deleted_at.is_(None)).values(
        email=users.c.id.concat("@deleted.invalid"), name="", avatar="", bio="", interest_tags=[],
        password_hash="", deleted_at=now, disabled_at=func.coalesce(users.c.disabled_at, now)))
    return result.rowcount == 1


def set_email_verified(conn: Connection, user_id: str, email: str) -> bool:
    """Mark `email` verified, if it is still the account's address."""
    return conn.execute(update(users).where(users.c.id == user_id, users.c.email == email,
                                            users.c.deleted_at.is_(None))
                        .values(email_verified=True)).rowcount == 1


def change_email(conn: Connection, user_id: str, old_email: str, new_email: str) -> bool:
    """The new address, verified (its owner followed a link sent to it), if the account's address
    is still `old_email`; raises Duplicate when another account took `new_email` meanwhile."""
    with duplicate_refused("user"):
        return conn.execute(update(users).where(users.c.id == user_id, users.c.email == old_email,
                                                users.c.deleted_at.is_(None))
                            .values(email=new_email, email_verified=True)).rowcount == 1

"""Users (contract section 4): creating an account. Signing in, sessions and the rest of an account's
life: accounts.py and sessions.py."""

from __future__ import annotations

import re
from collections.abc import Sequence

from lbauth.clock import Clock
from lbauth.core.accounts import passwords
from lbauth.core.crypto import opaque
from lbauth.errors import Conflict, ValidationFailed
from lbauth.storage import Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import User
from lbauth.storage.repo import users as repo

_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")


def normalize_email(email: str) -> str:
    email = (email or "").strip().lower()
    if len(email) > 320 or not _EMAIL.match(email):
        raise ValidationFailed("email must be an email address", field="email")
    return email


async def create_user(db: Database, clock: Clock, *, email: str, name: str, password: str,
                      avatar: str = "", bio: str = "", interest_tags: Sequence[str] = (),
                      email_verified: bool = False, cost: passwords.Cost = passwords.DEFAULT_COST) -> User:
    email = normalize_email(email)
    name = (name or "").strip()
    if not name or len(name) > 200:
        raise ValidationFailed("name must be 1 to 200 characters", field="name")
    if avatar and not re.match(r"^https?://\S+$", avatar):
        raise ValidationFailed("avatar must be an http(s) URL", field="avatar")
    await passwords.refuse_weak(password or "", email, name)
    user = User(id=opaque.new_id("usr_"), email=email, name=name, avatar=avatar or "", bio=bio or "",
                interest_tags=[t.strip() for t in interest_tags if t.strip()],
                password_hash=await passwords.hash_password(password, cost), created_at=int(clock.now()),
                disabled_at=None, deleted_at=None, email_verified=email_verified)
    try:
        await db.transaction(repo.insert_user, user)
    except Duplicate:
        raise Conflict("A user with this email already exists.") from None
    return user


MAX_NAME = 200


def checked_name(name: object) -> str:
    """A person's name as given, trimmed: 1 to 200 characters."""
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME:
        raise ValidationFailed(f"name must be 1 to {MAX_NAME} characters", field="name")
    return name.strip()

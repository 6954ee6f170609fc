"""Users and their login (contract section 4): argon2id passwords, `lba_ut_` user tokens."""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lbauth.clock import Clock
from lbauth.core.accounts import passwords
from lbauth.core.crypto import opaque
from lbauth.errors import Conflict, LoginFailed, TokenInvalid, ValidationFailed
from lbauth.storage import Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import User
from lbauth.storage.repo import users as repo

_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]+\.[^@\s]+$")


@dataclass(frozen=True)
class Session:
    token: str
    expires_in: int


def normalize_email(email: str) -> str:
    email = (email or "").strip().lower()
    if len(email) > 320 or not _EMAIL.match(email):
        raise ValidationFailed("email must be an email address")
    return email


async def create_user(db: Database, clock: Clock, *, email: str, name: str, password: str,
                      avatar: str = "", bio: str = "", interest_tags: Sequence[str] = ()) -> dict[str, Any]:
    email = normalize_email(email)
    name = (name or "").strip()
    if not name or len(name) > 200:
        raise ValidationFailed("name must be 1 to 200 characters")
    if len(password or "") < passwords.MIN_LENGTH:
        raise ValidationFailed(f"password must be at least {passwords.MIN_LENGTH} characters")
    if avatar and not re.match(r"^https?://\S+$", avatar):
        raise ValidationFailed("avatar must be an http(s) URL")
    user = User(id=opaque.new_id("usr_"), email=email, name=name, avatar=avatar or "", bio=bio or "",
                interest_tags=[t.strip() for t in interest_tags if t.strip()],
                password_hash=await passwords.hash_password(password), created_at=int(clock.now()))
    try:
        await db.transaction(repo.insert_user, user)
    except Duplicate:
        raise Conflict("A user with this email already exists.") from None
    return {"userId": user.id, "email": email, "name": name}


async def login(db: Database, clock: Clock, ttl: int, email: str, password: str) -> Session:
    """Check the password and open a session; the same answer for a wrong email or password."""
    try:
        email = normalize_email(email)
    except ValidationFailed:
        email = ""
    user = await db.read(repo.by_email, email) if email else None
    if not await passwords.verify_password(user.password_hash if user else None, password or "") or user is None:
        raise LoginFailed()
    token = opaque.new_secret(opaque.USER_TOKEN)
    now = int(clock.now())
    await db.transaction(repo.insert_token, token_hash=opaque.digest(token), user_id=user.id, now=now,
                         expires_at=now + ttl)
    return Session(token=token, expires_in=ttl)


async def user_for_token(db: Database, clock: Clock, token: str) -> User:
    """The user a live `lba_ut_` token belongs to, or TokenInvalid."""
    if not opaque.has_prefix(token, opaque.USER_TOKEN):
        raise TokenInvalid("A user token (from POST /api/auth/login) is required.")
    user = await db.read(repo.user_for_token, opaque.digest(token), int(clock.now()))
    if user is None:
        raise TokenInvalid("The user token is invalid or expired; log in again.")
    return user


async def logout(db: Database, clock: Clock, token: str) -> None:
    if opaque.has_prefix(token, opaque.USER_TOKEN):
        await db.transaction(repo.revoke_token, opaque.digest(token), int(clock.now()))


class Profiles:
    """Users by id for the identity endpoints (spec 4.5, 4.6), cached per process.

    A user never changes once created (no command or endpoint edits or deletes one), so a cached
    user is the stored one; the time limit only bounds how long an operator's direct edit of the
    table would go unseen. Bounded: the least recently used users go first."""

    MAX_AGE_SECONDS = 60
    MAX_ENTRIES = 50_000

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock
        self._users: OrderedDict[str, tuple[float, User]] = OrderedDict()

    async def by_id(self, user_id: str) -> User | None:
        now = self.clock.now()
        cached = self._users.get(user_id)
        if cached is not None and cached[0] > now:
            self._users.move_to_end(user_id)
            return cached[1]
        user = await self.db.read(repo.by_id, user_id)
        if user is not None:
            self._users[user_id] = (now + self.MAX_AGE_SECONDS, user)
            self._users.move_to_end(user_id)
            while len(self._users) > self.MAX_ENTRIES:
                self._users.popitem(last=False)
        return user

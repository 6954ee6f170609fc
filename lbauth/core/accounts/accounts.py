"""Accounts (contract sections 4 and 16): signing in, the profile, the password, leaving, and what
operators do to accounts (list, disable, enable, delete).

Every change that other processes must honour writes an entry to the check-list feed in its own
transaction: a session ended, or a user changed (their cached rows are then forgotten). Disabling
and deleting also put each of the user's grants on the check-list, so their access tokens are
refused by every process and every offline verifier, as a revoked grant's are.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypedDict

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.accounts import links, passwords
from lbauth.core.accounts.cache import AccountCache
from lbauth.core.accounts.links import LinkKind
from lbauth.core.accounts.sessions import (
    API,
    EndedSession,
    Sessions,
    SignedIn,
    announce_user_changed,
    end_all,
    open_session,
)
from lbauth.core.accounts.users import normalize_email
from lbauth.core.oauth.checklist import ServerCheckList, cover_racing_tokens
from lbauth.core.oauth.grant_revocation import revoke_grant_in, suspend_grant_in
from lbauth.settings import Settings
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import User
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import audit as audit_repo
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import factors as factors_repo
from lbauth.storage.repo import grants as grants_repo
from lbauth.storage.repo import sessions as sessions_repo
from lbauth.storage.repo import users as repo

MAX_NAME, MAX_BIO, MAX_TAGS, MAX_TAG = 200, 2000, 20, 40
_URL = re.compile(r"^https?://\S+$")


@dataclass(frozen=True)
class NewSession:
    token: str
    expires_in: int
    session_id: str


@dataclass(frozen=True)
class SecondStepNeeded:
    """The password was right, but the user has a second factor (contract 19): no session yet,
    only the pending step's token (`lba_mt_`, 5 minutes, single use) and the methods they have."""
    mfa_token: str
    methods: list[str]


class AccountStatus(StrEnum):
    DISABLED = "disabled"
    ENABLED = "enabled"
    DELETED = "deleted"


@dataclass(frozen=True)
class AccountChange:
    """What disabling, enabling or deleting did to an account (contract 16); a deletion also says
    when, and how many of the user's authorizations it revoked."""
    user_id: str
    email: str
    status: AccountStatus
    deleted_at: int | None = None
    revoked_authorizations: int = 0


class ProfileChanges(TypedDict, total=False):
    """The profile fields a user may change (contract 16), as sent: `checked_profile` checks them."""
    name: object
    avatar: object
    bio: object
    interest_tags: object


def checked_profile(changes: ProfileChanges, user: User) -> dict[str, Any]:
    """The changes validated (ValidationFailed names the refused `field`), merged onto the user's."""
    name = changes.get("name", user.name)
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > MAX_NAME:
        raise errors.ValidationFailed(f"name must be 1 to {MAX_NAME} characters", field="name")
    avatar = changes.get("avatar", user.avatar)
    if not isinstance(avatar, str) or (avatar and (len(avatar) > 2048 or not _URL.match(avatar))):
        raise errors.ValidationFailed("avatar must be an http(s) URL (at most 2048 characters) or empty",
                                      field="avatar")
    bio = changes.get("bio", user.bio)
    if not isinstance(bio, str) or len(bio) > MAX_BIO:
        raise errors.ValidationFailed(f"bio must be text of at most {MAX_BIO} characters", field="bio")
    tags = changes.get("interest_tags", list(user.interest_tags))
    if (not isinstance(tags, list) or len(tags) > MAX_TAGS
            or not all(isinstance(t, str) and 0 < len(t.strip()) <= MAX_TAG for t in tags)):
        raise errors.ValidationFailed(f"interestTags must be a list of at most {MAX_TAGS} tags of 1 to "
                                      f"{MAX_TAG} characters", field="interest_tags")
    unique_tags = list(dict.fromkeys(t.strip() for t in tags))
    return {"name": name.strip(), "avatar": avatar, "bio": bio, "interest_tags": unique_tags}


async def sign_in(db: Database, clock: Clock, ttl: int, email: str, password: str, *, kind: str = API,
                  source: audit.Source = audit.NO_SOURCE, actor: audit.Actor | None = None,
                  cost: passwords.Cost = passwords.DEFAULT_COST) -> NewSession | SecondStepNeeded:
    """Check the password and open a session; the same answer for a wrong email or password, and
    for a disabled or deleted account (contract 16). A user with a second factor gets a pending
    step instead (contract 19): their factors are read only then, after the password was right.
    Each attempt on an existing account is in its audit log (contract 21); the callers apply the
    rate limits first, so a refused attempt writes nothing. An unknown address records nothing.
    `actor`: the user, unless an operator signs in for them (`lbauth users token`)."""
    try:
        email = normalize_email(email)
    except errors.ValidationFailed:
        email = ""
    user = await db.read(repo.by_email, email) if email else None
    if not await passwords.verify_password(user.password_hash if user else None, password or "", cost):
        if user is not None:
            await _failed(db, clock, user, source, actor, "wrong_password")
        raise errors.LoginFailed()
    if user is None or not user.active:
        if user is not None:
            await _failed(db, clock, user, source, actor, "disabled")
        raise errors.LoginFailed()
    if user.mfa:
        return await _pending_second_step(db, clock, user, source, actor)
    token, session = await open_session(db, clock, user, kind=kind, ttl=ttl, source=source, actor=actor)
    return NewSession(token, ttl, session.id)


async def _failed(db: Database, clock: Clock, user: User, source: audit.Source, actor: audit.Actor | None,
                  reason: str) -> None:
    """A refused sign-in of an existing account, in its log: the one write of the attempt."""
    now = int(clock.now())

    def work(conn: Connection) -> None:
        audit.record(conn, now, audit.EventType.SIGN_IN, actor or audit.Actor.user(user.id), user_id=user.id,
                     source=source, outcome=audit.Outcome.FAILURE, detail={"method": "password", "reason": reason})
    await db.transaction(work, single_statement=True)


async def _pending_second_step(db: Database, clock: Clock, user: User, source: audit.Source,
                               actor: audit.Actor | None) -> SecondStepNeeded:
    now = int(clock.now())

    def work(conn: Connection) -> SecondStepNeeded:
        have = factors_repo.methods_of(conn, user.id)
        methods: list[str] = [m for m in ("totp", "passkey", "recovery_code") if m in have]
        token = links.issue(conn, LinkKind.MFA, email=user.email, user_id=user.id, now=now)
        audit.record(conn, now, audit.EventType.SIGN_IN, actor or audit.Actor.user(user.id), user_id=user.id,
                     source=source, outcome=audit.Outcome.PENDING, detail={"method": "password"})
        return SecondStepNeeded(token, methods)
    return await db.transaction(work)


class Accounts:
    """The account use cases, over the sessions and the process's cache of users."""

    MAX_USERS_CACHED = 50_000
    USER_CACHE_SECONDS = 60

    def __init__(self, db: Database, clock: Clock, settings: Settings, checklist: ServerCheckList) -> None:
        self.db, self.clock, self.settings, self.checklist = db, clock, settings, checklist
        self.users: AccountCache[str, User] = AccountCache(checklist, max_entries=self.MAX_USERS_CACHED,
                                                           max_age=self.USER_CACHE_SECONDS)
        self.sessions = Sessions(db, clock, checklist, settings.user_token_ttl, self.users)

    # ---- signing in and out ----------------------------------------------------------------------

    async def sign_in(self, email: str, password: str, *, kind: str,
                      source: audit.Source = audit.NO_SOURCE) -> NewSession | SecondStepNeeded:
        return await sign_in(self.db, self.clock, self.settings.user_token_ttl, email, password, kind=kind,
                             source=source, cost=self.settings.argon2)

    async def sign_out(self, signed_in: SignedIn, source: audit.Source = audit.NO_SOURCE) -> EndedSession:
        """End the session that made this request (POST /api/auth/logout, the pages' sign-out)."""
        return await self.sessions.end(signed_in.user.id, signed_in.session.id, source=source, own=True)

    # ---- the user's own account (contract 16) ----------------------------------------------------

    async def user(self, user_id: str) -> User | None:
        """A user by id (the identity endpoints), cached; a disabled or deleted one is None."""
        user = self.users.get(user_id)
        if user is None:
            started = self.users.reading()
            user = await self.db.read(repo.by_id, user_id)
            if user is None:
                return None
            self.users.put(user_id, user, started)
        return user if user.active else None

    async def update_profile(self, user: User, changes: ProfileChanges) -> User:
        """The user as changed; every process sees the change within 5 s (contract 16)."""
        fields = checked_profile(changes, user)
        now = int(self.clock.now())

        def work(conn: Connection) -> User | None:
            repo.update_profile(conn, user.id, **fields)
            announce_user_changed(conn, user.id, now)
            changes_repo.notify(conn)
            return repo.by_id(conn, user.id)
        updated = await self.db.transaction(work)
        await self.sessions.learn_now()
        if updated is None:
            raise errors.TokenRevoked("This account no longer exists.")
        return updated

    async def change_password(self, signed_in: SignedIn, current: str, new: str,
                              source: audit.Source = audit.NO_SOURCE) -> int:
        """The current password, then the new one's strength; every other session ends."""
        user = signed_in.user
        stored = await self.db.read(repo.by_id, user.id)
        cost = self.settings.argon2
        if stored is None or not await passwords.verify_password(stored.password_hash or None, current, cost):
            raise errors.LoginFailed("The current password is wrong.")
        await passwords.refuse_weak(new, stored.email, stored.name)
        new_hash = await passwords.hash_password(new, cost)
        now = int(self.clock.now())

        def work(conn: Connection) -> int:
            repo.set_password_hash(conn, user.id, new_hash)
            links.void_older(conn, user.id, LinkKind.MFA, now)  # a second step begun with the old password
            ended = end_all(conn, user.id, now, except_id=signed_in.session.id)
            audit.record(conn, now, audit.EventType.PASSWORD_CHANGED, audit.Actor.user(user.id), source=source,
                         detail={"endedSessions": ended})
            return ended
        ended = await self.db.transaction(work)
        await self.sessions.learn_now()
        return ended

    async def delete_own(self, signed_in: SignedIn, password: str) -> AccountChange:
        stored = await self.db.read(repo.by_id, signed_in.user.id)
        cost = self.settings.argon2
        if stored is None or not await passwords.verify_password(stored.password_hash or None, password, cost):
            raise errors.LoginFailed("The password is wrong.")
        return await self._delete(stored, audit.Actor.user(stored.id))

    # ---- operators (contract 16: lbauth users ...) ----------------------------------------------

    async def list_users(self) -> list[User]:
        return await self.db.read(repo.listed)

    async def by_email(self, email: str) -> User:
        user = await self.db.read(repo.by_email, normalize_email(email))
        if user is None or user.deleted_at is not None:
            raise errors.UserNotFound()
        return user

    async def disable(self, email: str, actor: audit.Actor = audit.OPERATOR) -> AccountChange:
        """Sessions ended, refresh tokens and open codes revoked, the access tokens issued so far on
        the check-list (for good: enabling does not bring them back); grants kept."""
        user = await self.by_email(email)
        now, access_ttl = int(self.clock.now()), self.settings.access_token_ttl

        def work(conn: Connection) -> list[str]:
            repo.set_disabled(conn, user.id, now)
            grant_ids = [g.id for g in grants_repo.live_grants_of_user(conn, user.id)]
            for grant_id in grant_ids:
                suspend_grant_in(conn, self.clock, grant_id, now, access_ttl)
            end_all(conn, user.id, now)
            announce_user_changed(conn, user.id, now)
            audit.record(conn, now, audit.EventType.USER_DISABLED, actor, user_id=user.id)
            return grant_ids
        grant_ids = await self.db.transaction(work)
        await self._after_grants_refused(grant_ids, now)
        return AccountChange(user.id, user.email, AccountStatus.DISABLED)

    async def enable(self, email: str, actor: audit.Actor = audit.OPERATOR) -> AccountChange:
        user = await self.by_email(email)
        now = int(self.clock.now())

        def work(conn: Connection) -> None:
            repo.set_disabled(conn, user.id, None)
            announce_user_changed(conn, user.id, now)
            audit.record(conn, now, audit.EventType.USER_ENABLED, actor, user_id=user.id)
            changes_repo.notify(conn)
        await self.db.transaction(work)
        await self.sessions.learn_now()
        return AccountChange(user.id, user.email, AccountStatus.ENABLED)

    async def delete(self, email: str, actor: audit.Actor = audit.OPERATOR) -> AccountChange:
        return await self._delete(await self.by_email(email), actor)

    async def _delete(self, user: User, actor: audit.Actor) -> AccountChange:
        """Contract 16: every grant revoked with its event, every session ended, the personal data
        erased and the email freed; then the bytes at rest (SQLite: the WAL) rewritten. The user's
        audit events stay, for operators, without an address or a user agent (contract 21); the
        deletion's own is recorded without either."""
        now, access_ttl = int(self.clock.now()), self.settings.access_token_ttl

        def work(conn: Connection) -> list[str]:
            # The user's row first: a sign-in or a first authorization under way (they share-lock
            # it) then either waits and sees the deletion, or is seen by the reads below.
            repo.lock_for_change(conn, user.id)
            grant_ids = []
            for grant in grants_repo.live_grants_of_user(conn, user.id):
                app = apps_repo.by_client_id(conn, grant.client_id)
                if app is not None and revoke_grant_in(conn, self.clock, app, grant.id, user.id, now, access_ttl):
                    grant_ids.append(grant.id)
            end_all(conn, user.id, now)
            sessions_repo.erase_details(conn, user.id)
            factors_repo.delete_totp(conn, user.id)  # the TOTP secret and passkeys are gone with the account
            factors_repo.delete_passkeys(conn, user.id)
            factors_repo.delete_codes(conn, user.id)
            if not repo.erase(conn, user.id, now):
                raise errors.UserNotFound()
            audit_repo.erase_personal(conn, user.id)
            audit.record(conn, now, audit.EventType.USER_DELETED, actor, user_id=user.id,
                         detail={"revokedAuthorizations": len(grant_ids)})
            announce_user_changed(conn, user.id, now)
            return grant_ids
        grant_ids = await self.db.transaction(work)
        await self._after_grants_refused(grant_ids, now)
        await self.db.erase_freed()
        return AccountChange(user.id, user.email, AccountStatus.DELETED, deleted_at=now,
                             revoked_authorizations=len(grant_ids))

    async def _after_grants_refused(self, grant_ids: list[str], now: int) -> None:
        for grant_id in grant_ids:
            await cover_racing_tokens(self.db, self.clock, self.checklist, grant_id, now,
                                      self.settings.access_token_ttl)
        await self.sessions.learn_now()

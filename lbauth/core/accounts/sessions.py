"""Server-side sessions (contract section 16): every user token and browser sign-in.

A session's credential is an `lba_ut_` token, stored by digest: the user token of the API, or
the value of the signed browser cookie. Checking one reads no database once this process has
seen it (`AccountCache`); ending one writes a session entry to the check-list feed, which every
process learns within 5 s (LISTEN/NOTIFY, polling as the fallback) and forgets the session on.
`lastUsedAt` is written at most once a minute per session, never on every request.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.accounts.cache import AccountCache
from lbauth.core.crypto import opaque
from lbauth.core.oauth.checklist import ServerCheckList, refresh_checklist
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import Change, Session, User
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import sessions as repo

API, BROWSER = "api", "browser"
USER_AGENT_LENGTH = 200  # contract 16: the first 200 characters
# Account entries only make processes forget what they cached; a process cut off for longer than
# this trusts nothing it cached before (AccountCache), so they need not live longer.
ENTRY_LIFETIME = 3600


@dataclass(frozen=True)
class SignedIn:
    """A live session and its user: what a user token or a session cookie proves."""
    session: Session
    user: User


@dataclass(frozen=True)
class ListedSession:
    """One of a user's live sessions as they see it listed; `current`: the one asking."""
    session: Session
    current: bool


@dataclass(frozen=True)
class EndedSession:
    session_id: str
    ended_at: int


def announce_ended(conn: Connection, session_ids: list[str], now: int) -> None:
    """Check-list entries for sessions just ended, in the ending transaction (before its notify)."""
    for session_id in session_ids:
        changes_repo.session_ended(conn, session_id, at=now, expires_at=now + ENTRY_LIFETIME)


def announce_user_changed(conn: Connection, user_id: str, now: int) -> None:
    changes_repo.user_changed(conn, user_id, at=now, expires_at=now + ENTRY_LIFETIME)


def end_all(conn: Connection, user_id: str, now: int, *, except_id: str | None = None) -> int:
    """End the user's live sessions (but `except_id`), announced; how many. Notifies on commit."""
    ended = repo.end(conn, repo.live_ids(conn, user_id, now, except_id=except_id), now)
    announce_ended(conn, ended, now)
    changes_repo.notify(conn)
    return len(ended)


async def open_session(db: Database, clock: Clock, user: User, *, kind: str, ttl: int,
                       source: audit.Source = audit.NO_SOURCE, amr: str = "pwd", method: str = "password",
                       actor: audit.Actor | None = None) -> tuple[str, Session]:
    """A new session for a user who just proved who they are (`user` as read before the password
    was checked) with what `amr` says (RFC 8176 values, space-separated): its credential (shown
    once) and the session, and the sign-in recorded in the audit log (`method`: how, in its words;
    `actor`: the user, unless an operator signed in for them). LoginFailed when the account was
    disabled, deleted or given a new password meanwhile: the session that change ended would
    otherwise be opened after it (and work again after `enable`)."""
    token = opaque.new_secret(opaque.USER_TOKEN)
    now = int(clock.now())
    session = Session(id=opaque.new_id("ses_"), token_hash=opaque.digest(token), user_id=user.id, kind=kind,
                      created_at=now, last_used_at=now, expires_at=now + ttl, ended_at=None,
                      user_agent=source.user_agent[:USER_AGENT_LENGTH], ip_address=source.ip_address[:64],
                      authenticated_at=now, amr=amr)

    def work(conn: Connection) -> bool:
        if not repo.insert_if_user_unchanged(conn, session, user.password_hash):
            return False
        audit.record(conn, now, audit.EventType.SIGN_IN, actor or audit.Actor.user(user.id), user_id=user.id,
                     source=source, detail={"method": method, "kind": kind})
        return True
    if not await db.transaction(work):
        raise errors.LoginFailed()
    return token, session


class Sessions:
    """Opens, checks, lists and ends sessions, with a per-process cache of live ones."""

    LAST_USED_EVERY = 60  # seconds: contract 16, "updated at most once a minute"
    MAX_ENTRIES = 50_000
    MAX_AGE_SECONDS = 60

    def __init__(self, db: Database, clock: Clock, checklist: ServerCheckList, ttl: int,
                 users: AccountCache[str, User]) -> None:
        self.db, self.clock, self.checklist, self.ttl, self.users = db, clock, checklist, ttl, users
        self._by_credential: AccountCache[bytes, Session] = AccountCache(
            checklist, max_entries=self.MAX_ENTRIES, max_age=self.MAX_AGE_SECONDS)
        # Session id -> digest, to forget a cached credential by the id a feed entry names. Bounded
        # like the cache: a credential whose id is let go here is dropped from the cache with it.
        self._credential_of: OrderedDict[str, bytes] = OrderedDict()
        checklist.account_listeners.append(self._learn)

    def _learn(self, entry: Change) -> None:
        if entry.session_id is not None:
            digest = self._credential_of.pop(entry.session_id, None)
            if digest is not None:
                self._by_credential.forget(digest)
        if entry.user_id is not None:
            self.users.forget(entry.user_id)

    async def check(self, token: str, kind: str = API) -> SignedIn:
        """The live session a credential names, and its user; TokenInvalid, TokenExpired, or
        TokenRevoked for an ended session (contract 16). Only a session of `kind`: the browser
        cookie's credential is no API user token, so a value copied out of a cookie (or a
        cookie jar) never works as a bearer token."""
        if not opaque.has_prefix(token, opaque.USER_TOKEN):
            raise errors.TokenInvalid("A user token (from POST /api/auth/login) is required.")
        key = hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()
        now = int(self.clock.now())
        session = self._by_credential.get(key)
        user = self.users.get(session.user_id) if session is not None else None
        if session is None or user is None:
            session, user = await self._load(key, token)
        if session.kind != kind:
            raise errors.TokenInvalid("A user token (from POST /api/auth/login) is required." if kind == API
                                      else "This is not a browser session.")
        if session.expires_at <= now:
            raise errors.TokenExpired("The user token has expired; sign in again.")
        if now - session.last_used_at >= self.LAST_USED_EVERY:
            # Counted before the write: a session ended meanwhile (here, or learned from the feed)
            # must not be cached again as live from the copy this request holds.
            read_started = self._by_credential.reading()
            await self.db.transaction(repo.touch, session.id, now, self.LAST_USED_EVERY)
            session = dataclasses.replace(session, last_used_at=now)
            if self._by_credential.reading() == read_started:
                self._remember_id(session.id, key)
                self._by_credential.put(key, session, read_started)
            else:
                self._by_credential.drop(key)  # the next use reads the session again
        return SignedIn(session, user)

    async def _load(self, key: bytes, token: str) -> tuple[Session, User]:
        sessions_read, users_read = self._by_credential.reading(), self.users.reading()
        found = await self.db.read(repo.with_user, opaque.digest(token))
        if found is None:
            raise errors.TokenInvalid("The user token is invalid; sign in again.")
        session, user = found
        if session.ended_at is not None or not user.active:
            raise errors.TokenRevoked("This session has ended; sign in again.")
        self._remember_id(session.id, key)
        self._by_credential.put(key, session, sessions_read)
        self.users.put(user.id, user, users_read)
        return session, user

    def _remember_id(self, session_id: str, key: bytes) -> None:
        """Before a credential is cached: a feed entry naming its session must find it."""
        self._credential_of[session_id] = key
        self._credential_of.move_to_end(session_id)
        while len(self._credential_of) > self.MAX_ENTRIES:
            _, dropped = self._credential_of.popitem(last=False)
            self._by_credential.drop(dropped)  # no longer reachable by its id: not trusted either

    async def listed(self, user_id: str, current_id: str | None) -> list[ListedSession]:
        return [ListedSession(session, session.id == current_id)
                for session in await self.db.read(repo.live_of_user, user_id, int(self.clock.now()))]

    async def end(self, user_id: str, session_id: str, *, source: audit.Source = audit.NO_SOURCE,
                  own: bool = False) -> EndedSession:
        """End one of the user's own live sessions; another user's is SessionNotFound, like none.
        `own`: the session that made the request (signing out)."""
        now = int(self.clock.now())

        def work(conn: Connection) -> None:
            if not isinstance(session_id, str) or session_id not in repo.live_ids(conn, user_id, now):
                raise errors.SessionNotFound()
            announce_ended(conn, repo.end(conn, [session_id], now), now)
            audit.record(conn, now, audit.EventType.SESSION_ENDED, audit.Actor.user(user_id), source=source,
                         detail={"ended": "this" if own else "one", "sessionId": session_id})
            changes_repo.notify(conn)
        await self.db.transaction(work)
        await self.learn_now()
        return EndedSession(session_id, now)

    async def end_others(self, user_id: str, keep: str, *, source: audit.Source = audit.NO_SOURCE) -> int:
        now = int(self.clock.now())

        def work(conn: Connection) -> int:
            count = end_all(conn, user_id, now, except_id=keep)
            if count:
                audit.record(conn, now, audit.EventType.SESSION_ENDED, audit.Actor.user(user_id), source=source,
                             detail={"ended": "others", "count": count})
            return count
        count = await self.db.transaction(work)
        await self.learn_now()
        return count

    async def learn_now(self) -> None:
        """This process learns at once what it just wrote; the others within 5 s."""
        await refresh_checklist(self.db, self.clock, self.checklist)


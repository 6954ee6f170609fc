"""The revocation check-list as each server process holds it (contract section 7).

The check-list (lbauth.verify.CheckList) holds grant ids and access-token ids whose tokens must be
refused although their signatures are good. Each entry lives until the longest-lived access token
it could cover has expired. Every process keeps the list in memory and learns new entries from the
change feed (storage/repo/changes.py) by cursor, so checking a token costs two dict look-ups and
no I/O. The same feed tells the process of ended sessions and changed users (contract 16).

A process that has not caught up with the feed for FRESH_SECONDS cannot know what was revoked
meanwhile, so the endpoints that accept access tokens fail closed (503) until it has (contract
section 7; `ServerCheckList.fresh`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from lbauth.clock import Clock
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import Change
from lbauth.storage.repo import changes as changes_repo
from lbauth.verify import MAX_LEEWAY, CheckList, Entry

# An entry outlives the tokens it covers by the most clock leeway a verifier may allow (60 s), so
# no revoked token passes an offline check in that margin.
KEEP_PAST_EXPIRY = MAX_LEEWAY
FRESH_SECONDS = 5  # contract section 7: not heard from the database for this long, fail closed


class ServerCheckList(CheckList):
    """A server process's check-list, and when it last caught up with the change feed.

    Its age is measured on the machine's monotonic clock, not on the process's `Clock` (which the
    tests freeze and move to expire tokens): it is about how long the process has been cut off."""

    def __init__(self, max_age: float | None = FRESH_SECONDS) -> None:
        super().__init__()
        self.max_age = max_age  # None: never stale (a test server with its periodic jobs stopped)
        self.caught_up_at = -math.inf
        # Since when this process has been fresh without a break: what it cached before a break
        # may have missed an account change (AccountCache trusts only what is younger).
        self.fresh_since = -math.inf
        self.account_listeners: list[Callable[[Change], None]] = []

    def caught_up(self, as_of: float) -> None:
        """Everything stored before monotonic time `as_of` is known here."""
        if not self.fresh():
            self.fresh_since = as_of
        self.caught_up_at = max(self.caught_up_at, as_of)

    def account_changed(self, change: Change) -> None:
        """A session ended or a user changed (contract 16): tell the account caches."""
        for listener in self.account_listeners:
            listener(change)

    def fresh(self) -> bool:
        return self.max_age is None or time.monotonic() - self.caught_up_at < self.max_age


def _entry(change: Change) -> Entry:
    return Entry(change.id, change.grant_id, change.jti, change.changed_at, change.expires_at)


async def refresh_checklist(db: Database, clock: Clock, checklist: CheckList) -> int:
    """Read what the change feed gained since this process last looked. The read goes ahead of the
    requests waiting for a database connection: a busy process must not fall behind on
    revocations, nor look cut off (see ServerCheckList)."""
    added, started = 0, time.monotonic()
    while True:
        rows = await db.read(changes_repo.since, checklist.cursor, int(clock.now()), first=True)
        checklist.add(_entry(r) for r in rows)
        if isinstance(checklist, ServerCheckList):
            for row in rows:
                if row.session_id or row.user_id:
                    checklist.account_changed(row)
        added += len(rows)
        if len(rows) < changes_repo.PAGE:
            if isinstance(checklist, ServerCheckList):
                checklist.caught_up(started)
            return added


def enter_grant(conn: Connection, grant_id: str, at: int, access_ttl: int) -> None:
    """Inside the caller's transaction (which notifies): every access token of the grant issued by
    `at` refused, until the last of them has expired."""
    changes_repo.grant_revoked(conn, grant_id, at=at, expires_at=at + access_ttl + KEEP_PAST_EXPIRY)


def cover_until_now(conn: Connection, clock: Clock, grant_id: str, revoked_at: int, access_ttl: int) -> None:
    """Inside the revoking transaction, just before its commit: if the clock has passed the
    entry's second, an entry at the current second too (see cover_racing_tokens), so that a crash
    right after the commit leaves at most the commit's own round trip uncovered."""
    latest = int(clock.now())
    if latest > revoked_at:
        enter_grant(conn, grant_id, latest, access_ttl)


async def cover_racing_tokens(db: Database, clock: Clock, checklist: CheckList, grant_id: str, revoked_at: int,
                              access_ttl: int) -> None:
    """After a grant's entry committed: learn it and, if the clock has moved past its second, add
    one at the current second, covering tokens minted from reads that raced the revocation
    (docs/architecture.md, "Revocation races")."""
    await refresh_checklist(db, clock, checklist)
    later = int(clock.now())
    if later > (checklist.grant_revoked_at(grant_id) or revoked_at):
        def work(conn: Connection) -> None:
            enter_grant(conn, grant_id, later, access_ttl)
            changes_repo.notify(conn)
        await db.transaction(work)
        await refresh_checklist(db, clock, checklist)

"""The change feed as stored (contract sections 7 and 16), the revocation check-list among it:
entries in id order, read by cursor, live until they expire."""

from __future__ import annotations

from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import Change
from lbauth.storage.repo import changes as repo
from tests.storage.conftest import NOW


async def test_the_feed_since_a_cursor(db: Database) -> None:
    await db.transaction(repo.grant_revoked, "gnt_1", at=NOW, expires_at=NOW + 100)
    await db.transaction(repo.token_revoked, "jti-1", at=NOW + 1, expires_at=NOW + 10)
    await db.transaction(repo.grant_revoked, "gnt_2", at=NOW + 2, expires_at=NOW + 100)

    entries = await db.read(repo.since, 0, NOW)
    assert [(e.grant_id, e.jti, e.changed_at, e.expires_at) for e in entries] == [
        ("gnt_1", None, NOW, NOW + 100), (None, "jti-1", NOW + 1, NOW + 10), ("gnt_2", None, NOW + 2, NOW + 100)]
    assert all(isinstance(e, Change) for e in entries)
    assert entries[0].id < entries[1].id < entries[2].id
    assert await db.read(repo.since, entries[0].id, NOW) == entries[1:]
    assert await db.read(repo.since, entries[2].id, NOW) == []
    # An expired entry leaves the feed: nothing it covers can still be live.
    assert await db.read(repo.since, 0, NOW + 10) == [entries[0], entries[2]]


async def test_the_feed_is_read_a_page_at_a_time(db: Database) -> None:
    def insert_many(conn: Connection) -> None:
        for i in range(repo.PAGE + 5):
            repo.token_revoked(conn, f"jti-{i}", at=NOW, expires_at=NOW + 100)
    await db.transaction(insert_many)

    page = await db.read(repo.since, 0, NOW)
    assert len(page) == repo.PAGE
    rest = await db.read(repo.since, page[-1].id, NOW)
    assert [e.jti for e in rest] == [f"jti-{i}" for i in range(repo.PAGE, repo.PAGE + 5)]


async def test_what_an_entry_covers(db: Database) -> None:
    await db.transaction(repo.grant_revoked, "gnt_1", at=NOW, expires_at=NOW + 100)
    await db.transaction(repo.token_revoked, "jti-1", at=NOW, expires_at=NOW + 100)

    assert await db.read(repo.covers, "gnt_1", "other", NOW, NOW) is True  # issued at the revocation's second
    assert await db.read(repo.covers, "gnt_1", "other", NOW + 1, NOW) is False  # issued after it
    assert await db.read(repo.covers, None, "jti-1", NOW + 50, NOW) is True
    assert await db.read(repo.covers, "gnt_2", "other", NOW, NOW) is False
    assert await db.read(repo.covers, "gnt_1", "jti-1", NOW, NOW + 100) is False  # both expired


async def test_notify_is_a_statement_on_postgresql_only(db: Database) -> None:
    before = db.statements
    await db.transaction(repo.notify)
    assert db.statements - before == (0 if db.is_sqlite else 1)

"""The revocation feed for offline verifiers (contract sections 7 and 9): the published part of
the change feed, its grant and access-token entries, read page by page with an opaque cursor."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from lbauth import errors
from lbauth.clock import Clock
from lbauth.storage.db import Database
from lbauth.storage.records import Change
from lbauth.storage.repo import changes as changes_repo

POLL_AFTER_SECONDS = 2


@dataclass(frozen=True)
class FeedPage:
    """Live entries after a cursor; `cursor` names the last of them; `poll_after`: seconds until
    the next read is worth making (0: more entries are waiting)."""
    entries: list[Change]
    cursor: str
    poll_after: int


def encode_cursor(value: int) -> str:
    return base64.urlsafe_b64encode(f"rv1:{value}".encode()).rstrip(b"=").decode()


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, value = raw.split(":", 1)
        if prefix != "rv1" or not value.isdigit():
            raise ValueError
        return int(value)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise errors.ValidationFailed("since must be a cursor returned by this endpoint") from None


async def feed(db: Database, clock: Clock, since: str | None) -> FeedPage:
    """GET /api/oauth/revocations: live entries after the cursor (all of them without one)."""
    after = decode_cursor(since) if since else 0
    rows = await db.read(changes_repo.since, after, int(clock.now()), published=True)
    last = rows[-1].id if rows else after
    return FeedPage(rows, encode_cursor(last), 0 if len(rows) == changes_repo.PAGE else POLL_AFTER_SECONDS)

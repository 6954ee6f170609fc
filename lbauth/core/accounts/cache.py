"""What a process remembers of accounts, so that the hot paths read no database: users by id and
sessions by credential, forgotten on the account entries of the check-list feed (contract 16:
a change is honoured by every process within 5 s).

An entry is trusted only while the check-list has been fresh without a break since it was
stored: a process cut off from its database may have missed the entry that would have removed
it. A read that raced a change is not stored (`reading()` / `put`), so a stale row cannot be
cached after the change that outdates it was learned.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Generic, TypeVar

from lbauth.core.oauth.checklist import ServerCheckList

K = TypeVar("K")
V = TypeVar("V")


class AccountCache(Generic[K, V]):
    """A bounded LRU map whose entries live `max_age` seconds (a backstop: entries are forgotten
    when the feed says so) and only while the check-list is fresh."""

    def __init__(self, checklist: ServerCheckList, *, max_entries: int, max_age: float) -> None:
        self.checklist, self.max_entries, self.max_age = checklist, max_entries, max_age
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._changes = 0  # forgets so far: a read that saw a change happen is not stored

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        stored_at, value = entry
        now = time.monotonic()
        if now - stored_at > self.max_age or stored_at < self.checklist.fresh_since or not self.checklist.fresh():
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def reading(self) -> int:
        """Call before the database read whose result `put` will store."""
        return self._changes

    def put(self, key: K, value: V, read_started: int) -> None:
        if read_started != self._changes:
            return  # something changed while the row was read: it may be the old row
        self._entries[key] = (time.monotonic(), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget(self, key: K) -> None:
        self._changes += 1
        self._entries.pop(key, None)

    def drop(self, key: K) -> None:
        """Let an entry go (to be read again; nothing changed: reads under way may still store theirs)."""
        self._entries.pop(key, None)

    def clear(self) -> None:
        self._changes += 1
        self._entries.clear()

"""The revocation check-list (contract section 7): grant ids and access-token ids whose tokens
must be refused although their signatures are good. Each entry lives until the longest-lived
access token it could cover has expired; every process keeps the list in memory and learns of new
entries from the `revocations` table (by cursor), so a check costs two set look-ups, no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import Row


@dataclass(frozen=True)
class Entry:
    cursor: int
    grant_id: str | None
    jti: str | None
    revoked_at: int
    expires_at: int


class CheckList:
    def __init__(self) -> None:
        self._grants: dict[str, int] = {}  # grant id -> expires_at
        self._jtis: dict[str, int] = {}
        self.cursor = 0  # the highest revocations.id seen

    def __len__(self) -> int:
        return len(self._grants) + len(self._jtis)

    def is_revoked(self, grant_id: str | None, jti: str | None) -> bool:
        return (grant_id is not None and grant_id in self._grants) or (jti is not None and jti in self._jtis)

    def add(self, entries: Iterable[Row | Entry]) -> None:
        for entry in entries:
            if entry.grant_id:
                self._grants[entry.grant_id] = max(entry.expires_at, self._grants.get(entry.grant_id, 0))
            if entry.jti:
                self._jtis[entry.jti] = max(entry.expires_at, self._jtis.get(entry.jti, 0))
            cursor = getattr(entry, "cursor", None) or getattr(entry, "id", 0)
            self.cursor = max(self.cursor, cursor)

    def prune(self, now: float) -> int:
        """Drop entries whose tokens have all expired; returns how many."""
        before = len(self)
        self._grants = {k: v for k, v in self._grants.items() if v > now}
        self._jtis = {k: v for k, v in self._jtis.items() if v > now}
        return before - len(self)

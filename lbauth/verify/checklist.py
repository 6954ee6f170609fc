"""The revocation check-list (contract section 7): what a good signature no longer vouches for.
The server and every verifier keep one, fed by the revocation feed."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    cursor: int
    grant_id: str | None
    jti: str | None
    revoked_at: int
    expires_at: int


class CheckList:
    """Grant ids and access-token ids whose tokens must be refused although their signatures are
    good. A grant entry refuses that grant's tokens issued at or before its `revoked_at`; a jti
    entry, that one token. Checking costs two dict look-ups, whatever the list's size."""

    def __init__(self) -> None:
        self._grants: dict[str, tuple[int, int]] = {}  # grant id -> (revoked_at, expires_at)
        self._jtis: dict[str, int] = {}  # jti -> expires_at
        self.cursor: int | str = 0  # the server's feed position (an id there, an opaque string here)

    def __len__(self) -> int:
        return len(self._grants) + len(self._jtis)

    def is_revoked(self, grant_id: str | None, jti: str | None, issued_at: float) -> bool:
        if jti is not None and jti in self._jtis:
            return True
        entry = self._grants.get(grant_id) if grant_id is not None else None
        return entry is not None and issued_at <= entry[0]

    def grant_revoked_at(self, grant_id: str) -> int | None:
        entry = self._grants.get(grant_id)
        return entry[0] if entry else None

    def add(self, entries: Iterable[Entry]) -> None:
        for entry in entries:  # a server's session and user entries carry neither id: only the cursor moves
            if entry.grant_id:
                revoked_at, expires_at = self._grants.get(entry.grant_id, (0, 0))
                self._grants[entry.grant_id] = (max(revoked_at, entry.revoked_at), max(expires_at, entry.expires_at))
            if entry.jti:
                self._jtis[entry.jti] = max(entry.expires_at, self._jtis.get(entry.jti, 0))
            if isinstance(self.cursor, int):
                self.cursor = max(self.cursor, entry.cursor)

    def prune(self, now: float) -> int:
        """Drop entries whose tokens have all expired; returns how many."""
        before = len(self)
        self._grants = {k: v for k, v in self._grants.items() if v[1] > now}
        self._jtis = {k: v for k, v in self._jtis.items() if v > now}
        return before - len(self)

"""The injected clock: every expiry in lbauth reads time from here, never from `time` directly.

Tests pass a `FrozenClock` and move it forward instead of sleeping.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the Unix epoch."""

    async def sleep(self, seconds: float) -> None:
        """Let `seconds` pass."""


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class FrozenClock:
    """A clock that moves only when told to."""

    def __init__(self, start: float | None = None) -> None:
        self._now = float(int(time.time()) if start is None else start)

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Time passes at once: a frozen clock never makes a test wait."""
        self.advance(seconds)
        await asyncio.sleep(0)

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def set(self, when: float) -> None:
        self._now = float(when)


def iso(ts: float | None) -> str | None:
    """ISO 8601 in UTC with a `Z` suffix (contract section 3), or None."""
    if ts is None:
        return None
    return datetime.fromtimestamp(int(ts), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

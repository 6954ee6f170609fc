"""Rate limits (issue 7, RFC 9700 4.x brute-force guidance): fixed windows counted per key, in
memory, per process, on the injected clock.

Keys name what is limited: ("token-client", client_id), ("token-address", ip),
("login-account", email), ("login-address", ip), ("register-address", ip) (RFC 7591 registration
and RFC 7592 reads and deletes, contract 17). A request over a limit is refused with 429
`request.rate_limited` and `Retry-After`, the seconds until its window ends. With several workers
each counts on its own, so the effective limit is at most `workers` times the one below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lbauth.clock import Clock
from lbauth.errors import RateLimited


@dataclass(frozen=True)
class Limit:
    requests: int
    window_seconds: int


# Generous for honest clients (an app refreshing for many users shares its client id), tight for
# guessing: ten password tries a minute per account is a few hundred a day at most.
LIMITS = {
    "token-client": Limit(600, 60),
    "token-address": Limit(1200, 60),
    "login-account": Limit(10, 60),
    "login-address": Limit(100, 60),
    # Each registration makes an app: a client registers once per installation, not per request.
    "register-address": Limit(20, 60),
}


class RateLimiter:
    MAX_KEYS = 100_000  # beyond this, windows that have ended are dropped first

    def __init__(self, clock: Clock, setting: bool | tuple[tuple[str, int, int], ...] = True) -> None:
        """`setting` is Settings.rate_limits: on, off, or (kind, requests, seconds) overrides."""
        self.clock, self.enabled = clock, bool(setting)
        self.limits = dict(LIMITS)
        if isinstance(setting, tuple):
            self.limits.update({kind: Limit(requests, seconds) for kind, requests, seconds in setting})
        self._windows: dict[tuple[str, str], tuple[int, int]] = {}  # key -> (window index, count)

    def hit(self, kind: str, subject: str) -> None:
        """Count one request against `kind`'s limit for `subject`; RateLimited when over it."""
        if not self.enabled or not subject:
            return
        limit = self.limits[kind]
        now = self.clock.now()
        window = int(now // limit.window_seconds)
        key = (kind, subject.lower())
        current, count = self._windows.get(key, (window, 0))
        count = count + 1 if current == window else 1
        if len(self._windows) >= self.MAX_KEYS and key not in self._windows:
            self._prune(now)
        self._windows[key] = (window, count)
        if count > limit.requests:
            retry_after = max(1, math.ceil((window + 1) * limit.window_seconds - now))
            raise RateLimited(headers={"Retry-After": str(retry_after)})

    def _prune(self, now: float) -> None:
        live = {k: v for k, v in self._windows.items() if v[0] == int(now // self.limits[k[0]].window_seconds)}
        self._windows = live if len(live) < self.MAX_KEYS else {}

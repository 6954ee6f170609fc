"""Rate limits (issue 7, RFC 9700 4.x brute-force guidance): fixed windows counted per key, in
memory, per process, on the injected clock.

Keys name what is limited: ("token-client", client_id and the caller's address), ("token-address", ip),
("login-account", email), ("login-address", ip), ("register-address", ip) (RFC 7591 registration
and RFC 7592 reads and deletes, contract 17), ("document-address", ip) and ("document-host", host)
(fetches of client metadata documents), ("signup-address", ip), ("signup-account", email),
("reset-address", ip), ("reset-account", email) and ("mail-account", user id) (mail, contract 18),
("mfa-account", user id) (wrong second steps, contract 19), ("device-session", session id) and
("device-address", ip) (wrong user codes at {auth_url}/device, RFC 8628 5.1).
A request over a limit is refused with 429
`request.rate_limited` and `Retry-After`, the seconds until its window ends. With several workers
each counts on its own, so the effective limit is at most `workers` times the one below.
"""

from __future__ import annotations

import ipaddress
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
    # Fetches of client metadata documents (a cached copy costs nothing): what an anonymous caller
    # makes lbauth do, and what one host is asked for.
    "document-address": Limit(30, 60),
    "document-host": Limit(120, 60),
    # What sends mail (contract 18): per source address, and per address mailed (or account), so
    # that nobody can fill a stranger's mailbox. Known and unknown addresses count alike.
    "signup-address": Limit(30, 600),
    "signup-account": Limit(5, 900),
    "reset-address": Limit(30, 600),
    "reset-account": Limit(5, 900),
    "mail-account": Limit(5, 900),  # a signed-in user's verification and email-change requests
    # Wrong second steps (contract 19), per account: counted by `failed`, enforced by `check`.
    "mfa-account": Limit(5, 300),
    # Wrong user codes typed at {auth_url}/device (RFC 8628 5.1: the code is short), per browser
    # session and per address: counted by `hit` after a wrong code, enforced by `check` before any.
    "device-session": Limit(5, 60),
    "device-address": Limit(5, 60),
}


def address_subject(address: str) -> str:
    """What an address limit counts: an IPv4 address, or an IPv6 address's /64, the block one
    subscriber usually holds whole (one host can take any of its 2^64 addresses)."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class RateLimiter:
    """Counts per kind of limit, each kind in its own table of at most MAX_KEYS subjects, so a
    flood of one kind (client ids, which anyone may make up) never pushes out another (an account's
    password guesses). A full table forgets its least recently counted subject, one at a time:
    a flood empties nothing at once."""

    MAX_KEYS = 100_000

    def __init__(self, clock: Clock, setting: bool | tuple[tuple[str, int, int], ...] = True) -> None:
        """`setting` is Settings.rate_limits: on, off, or (kind, requests, seconds) overrides."""
        self.clock, self.enabled = clock, bool(setting)
        self.limits = dict(LIMITS)
        if isinstance(setting, tuple):
            self.limits.update({kind: Limit(requests, seconds) for kind, requests, seconds in setting})
        # kind -> subject -> (window index, count), least recently counted first
        self._windows: dict[str, dict[str, tuple[int, int]]] = {kind: {} for kind in self.limits}

    def hit(self, kind: str, subject: str, address: str | None = None) -> None:
        """Count one request against `kind`'s limit for `subject` (coming from `address`, when the
        limit counts the two together); RateLimited when over it."""
        if not self.enabled or not subject:
            return
        if address is not None:
            subject = f"{subject} from {address_subject(address)}"
        limit = self.limits[kind]
        now = self.clock.now()
        window = int(now // limit.window_seconds)
        subject = _counted(kind, subject)
        table = self._windows[kind]
        current, count = table.pop(subject, (window, 0))
        count = count + 1 if current == window else 1
        if len(table) >= self.MAX_KEYS:
            del table[next(iter(table))]
        table[subject] = (window, count)
        if count > limit.requests:
            retry_after = max(1, math.ceil((window + 1) * limit.window_seconds - now))
            raise RateLimited(headers={"Retry-After": str(retry_after)})

    def check(self, kind: str, subject: str) -> None:
        """RateLimited when `subject` has used up `kind`'s limit in this window; counts nothing
        (with `hit` after a failure: a limit on failures, such as wrong second steps)."""
        if not self.enabled or not subject:
            return
        limit = self.limits[kind]
        now = self.clock.now()
        window = int(now // limit.window_seconds)
        current, count = self._windows[kind].get(_counted(kind, subject), (window, 0))
        if current == window and count >= limit.requests:
            retry_after = max(1, math.ceil((window + 1) * limit.window_seconds - now))
            raise RateLimited(headers={"Retry-After": str(retry_after)})


def _counted(kind: str, subject: str) -> str:
    """The key a subject is counted under: an address limit's, its `address_subject`."""
    return address_subject(subject) if kind.endswith("-address") else subject.lower()

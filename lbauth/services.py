"""What one server process shares between its handlers: settings, the clock, the database, the
master keys, the current signing key ring, the revocation check-list and the token minter.
Handlers receive it through `initialize`."""

from __future__ import annotations

from dataclasses import dataclass, field

from lbauth.clock import Clock
from lbauth.core.apps import AppPolicy
from lbauth.core.keys import KeyRing, load_keyring
from lbauth.core.masterkey import MasterKeys, load_master_keys
from lbauth.core.ratelimit import RateLimiter
from lbauth.core.revocation import CheckList, refresh_checklist
from lbauth.core.tokens import AccessTokens
from lbauth.core.users import Profiles
from lbauth.metrics import Metrics
from lbauth.settings import Settings
from lbauth.storage.db import Database


@dataclass
class Services:
    settings: Settings
    clock: Clock
    db: Database
    master_keys: MasterKeys
    keyring: KeyRing
    checklist: CheckList = field(default_factory=CheckList)

    def __post_init__(self) -> None:
        self.tokens = AccessTokens(self.settings, self.clock, lambda: self.keyring, self.checklist)
        self.profiles = Profiles(self.db, self.clock)
        self.rate_limits = RateLimiter(self.clock, self.settings.rate_limits)
        self.metrics = Metrics()

    @property
    def app_policy(self) -> AppPolicy:
        return AppPolicy(development=self.settings.development)

    async def poll_revocations(self) -> int:
        """Learn the check-list entries other processes wrote; drop the expired ones."""
        added = await refresh_checklist(self.db, self.clock, self.checklist)
        self.checklist.prune(self.clock.now())
        return added

    def reload_master_keys(self) -> bool:
        """Re-read the master key file (a rotation adds, promotes and retires keys there); True if
        it changed. Keys given in LBAUTH_MASTER_KEY change only with a restart."""
        if self.settings.master_key:
            return False
        keys = load_master_keys(self.settings)
        changed = keys.ids != self.master_keys.ids
        if changed:
            self.master_keys = keys
        return changed

    async def reload_keys(self) -> bool:
        """Pick up a key rotation made by another process or a maintainer's tool; True if changed."""
        keyring = await load_keyring(self.db, self.master_keys)
        changed = keyring.version != self.keyring.version
        if changed:
            self.keyring = keyring
        return changed

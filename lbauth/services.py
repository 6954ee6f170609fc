"""What one server process shares between its handlers: settings, the clock, the database,
the master keys and the current signing key ring. Handlers receive it through `initialize`."""

from __future__ import annotations

from dataclasses import dataclass

from lbauth.clock import Clock
from lbauth.core.apps import AppPolicy
from lbauth.core.keys import KeyRing, load_keyring
from lbauth.core.masterkey import MasterKeys
from lbauth.settings import Settings
from lbauth.storage.db import Database


@dataclass
class Services:
    settings: Settings
    clock: Clock
    db: Database
    master_keys: MasterKeys
    keyring: KeyRing

    @property
    def app_policy(self) -> AppPolicy:
        return AppPolicy(development=self.settings.development)

    async def reload_keys(self) -> bool:
        """Pick up a key rotation made by another process or a maintainer's tool; True if changed."""
        keyring = await load_keyring(self.db, self.master_keys)
        changed = keyring.version != self.keyring.version
        if changed:
            self.keyring = keyring
        return changed

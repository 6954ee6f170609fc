"""What one server process shares between its handlers: settings, the clock, the database, the
master keys, the current signing key ring, the revocation check-list, the token minter, the
authorization server, the accounts (users, sessions), the apps, client registration and the
operations checks. Handlers receive it through `initialize` and call its service objects, which hold
the database."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from lbauth.clock import Clock
from lbauth.core.accounts.accounts import Accounts
from lbauth.core.accounts.recovery import Recovery
from lbauth.core.audit.log import AuditLog
from lbauth.core.clients.apps import AppPolicy, Apps
from lbauth.core.crypto.keys import KeyRing, ensure_active_key, load_keyring
from lbauth.core.crypto.masterkey import MasterKeys, load_master_keys
from lbauth.core.factors.factors import Factors
from lbauth.core.factors.passkeys import Passkeys
from lbauth.core.mail import outbox
from lbauth.core.mail.outbox import Composer
from lbauth.core.oauth.checklist import ServerCheckList, refresh_checklist
from lbauth.core.oauth.server import GRANT_TYPE_NAMES, GRANT_TYPES, AuthorizationServer
from lbauth.core.oauth.tokens import AccessTokens
from lbauth.core.oidc.id_tokens import IdTokens
from lbauth.core.operations import Operations
from lbauth.core.ratelimit import RateLimiter
from lbauth.core.registration import dynamic
from lbauth.core.registration.documents import ClientDocuments
from lbauth.core.registration.dynamic import DynamicRegistration
from lbauth.errors import ServerUnavailable
from lbauth.metrics import Metrics
from lbauth.outbound import DocumentFetcher
from lbauth.settings import Settings
from lbauth.storage.db import RETRY_AFTER_SECONDS, Database

# A request that finds the check-list stale waits this long for it to catch up before it is
# answered 503: short enough to answer within 1 s when the database is away (contract section 3).
CATCH_UP_WAIT_SECONDS = 0.5


@dataclass
class Services:
    settings: Settings
    clock: Clock
    db: Database
    master_keys: MasterKeys
    keyring: KeyRing
    checklist: ServerCheckList = field(default_factory=ServerCheckList)

    def __post_init__(self) -> None:
        self._catching_up: asyncio.Future | None = None
        self.tokens = AccessTokens(self.settings, self.clock, lambda: self.keyring, self.checklist)
        self.id_tokens = IdTokens(self.settings, self.clock, lambda: self.keyring, self.activate_signing_key)
        self.rate_limits = RateLimiter(self.clock, self.settings.rate_limits)
        self.document_fetcher = DocumentFetcher(self.settings)
        grant_types = list(GRANT_TYPE_NAMES)  # the token endpoint's: clients may register them
        self.client_documents = ClientDocuments(self.db, self.clock, self.document_fetcher, lambda: self.master_keys,
                                                development=self.settings.development, grant_types=grant_types,
                                                rate_limits=self.rate_limits)
        self.oauth = AuthorizationServer(self.db, self.clock, self.settings, self.tokens, self.checklist,
                                         self.id_tokens, self.client_documents, grant_types=GRANT_TYPES)
        self.registration = DynamicRegistration(
            self.db, self.clock, lambda: self.master_keys, self.checklist,
            dynamic.intake([method.name for method in self.oauth.client_auth_methods], grant_types),
            base_url=self.settings.base_url, access_ttl=self.settings.access_token_ttl)
        self.apps = Apps(self.db, self.clock, lambda: self.master_keys, self.app_policy)
        self.accounts = Accounts(self.db, self.clock, self.settings, self.checklist)
        self.factors = Factors(self.db, self.clock, self.settings, lambda: self.master_keys, self.accounts.sessions,
                               self.rate_limits)
        self.passkeys = Passkeys(self.db, self.clock, self.settings, lambda: self.master_keys, self.factors)
        self.recovery = Recovery(self.db, self.clock, self.settings, lambda: self.master_keys, self.accounts.sessions,
                                 second_step=self.factors)  # a reset asks for the user's second factor
        self.operations = Operations(self.db, self.clock)
        self.audit = AuditLog(self.db, self.clock, self.settings.audit_retention_days)
        self.metrics = Metrics()
        self.mail_composers: dict[str, Composer] = {**self.recovery.composers(), **self.factors.composers()}  # by kind

    async def forget_old_mail(self) -> int:
        return await outbox.forget_old(self.db, self.clock)

    @property
    def app_policy(self) -> AppPolicy:
        return AppPolicy(development=self.settings.development, grant_types=GRANT_TYPE_NAMES)

    async def poll_revocations(self) -> int:
        """Learn the check-list entries other processes wrote; drop the expired ones."""
        added = await refresh_checklist(self.db, self.clock, self.checklist)
        self.checklist.prune(self.clock.now())
        return added

    async def require_fresh_checklist(self) -> None:
        """Contract section 7: a process that has not heard from the database for 5 s fails closed
        on the endpoints that accept access tokens, until it has caught up. A request that finds
        the list stale starts a refresh (one at a time, shared by every such request) and waits a
        moment for it: a process that merely missed its poll answers normally."""
        if self.checklist.fresh():
            return
        if self._catching_up is None or self._catching_up.done():
            self._catching_up = asyncio.ensure_future(self.poll_revocations())
            self._catching_up.add_done_callback(_ignore_failure)  # its failure is the 503 below
        await asyncio.wait({self._catching_up}, timeout=CATCH_UP_WAIT_SECONDS)
        if not self.checklist.fresh():
            raise ServerUnavailable("This server cannot reach its database to learn which tokens were revoked; "
                                    "retry later.", headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

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

    async def activate_signing_key(self, alg: str) -> None:
        """An active key of `alg` in the ring: made now if no process has made one (contract 8: the
        ring holds a key for every algorithm apps ask for; the CLI and the console make it at once)."""
        await ensure_active_key(self.db, self.clock, self.master_keys, alg)
        await self.reload_keys()

    async def reload_keys(self) -> bool:
        """Pick up a key rotation made by another process or a maintainer's tool; True if changed."""
        keyring = await load_keyring(self.db, self.master_keys, self.keyring)
        changed = keyring is not self.keyring
        if changed:
            self.keyring = keyring
        return changed


def _ignore_failure(task: asyncio.Future) -> None:
    if not task.cancelled():
        task.exception()

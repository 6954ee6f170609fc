"""Master key rotation for what is sealed at rest (contract section 8; tools/rotate_master_key.py):
count the values sealed under each master key, and re-seal them under the first one."""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass

from lbauth.clock import Clock
from lbauth.core import audit
from lbauth.core.accounts.links import payload_purpose
from lbauth.core.clients.metadata import webhook_secret_purpose
from lbauth.core.crypto.keys import signing_key_purpose
from lbauth.core.crypto.masterkey import MasterKeys, load_master_keys, require_keys
from lbauth.core.factors.factors import totp_purpose
from lbauth.core.mail.outbox import letter_purpose, params_purpose
from lbauth.settings import Settings
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import factors as factors_repo
from lbauth.storage.repo import keys as keys_repo
from lbauth.storage.repo import links as links_repo
from lbauth.storage.repo import mail as mail_repo


@dataclass(frozen=True)
class SealedKind:
    """A kind of sealed value: all of them as (owner id, sealed value) pairs, how to store one
    sealed anew, and the purpose each value is bound to (masterkey.MasterKeys.seal)."""
    read_all: Callable[[Connection], list[tuple[str, str]]]
    store: Callable[[Connection, str, str], None]
    purpose: Callable[[str], str]


SEALED = (
    SealedKind(apps_repo.webhook_secrets, apps_repo.reseal_webhook_secret, webhook_secret_purpose),
    SealedKind(keys_repo.private_keys, keys_repo.reseal_private_key, signing_key_purpose),
    SealedKind(mail_repo.sealed_params, mail_repo.reseal_params, params_purpose),
    SealedKind(mail_repo.sealed_letters, mail_repo.reseal_letter, letter_purpose),
    SealedKind(links_repo.sealed_payloads, links_repo.reseal_payload, payload_purpose),
    SealedKind(factors_repo.sealed_secrets, factors_repo.reseal_secret, totp_purpose),
)


async def sealed_counts(db: Database) -> dict[str, int]:
    """How many stored values each master key id seals."""
    def work(conn: Connection) -> dict[str, int]:
        counts: collections.Counter[str] = collections.Counter()
        for kind in SEALED:
            for _, value in kind.read_all(conn):
                counts[MasterKeys.sealed_key_id(value)] += 1
        return dict(counts)
    return await db.read(work)


async def master_keys_for(db: Database, settings: Settings) -> MasterKeys:
    """The configured master keys, checked against the database: every key id that seals a stored
    value must be among them (contract 8), else MissingMasterKey names the missing ids. A key is
    generated into the data dir only for a database that seals nothing yet."""
    sealed_ids = set(await sealed_counts(db))
    keys = load_master_keys(settings, sealed_ids)
    require_keys(sealed_ids, keys)
    return keys


async def reseal_all(db: Database, master_keys: MasterKeys, clock: Clock | None = None,
                     actor: audit.Actor = audit.OPERATOR) -> int:
    """Open every sealed value with whichever configured key sealed it and seal it again under the
    first key, in one transaction; returns how many changed. With a `clock`, the rotation is
    recorded in the audit log, in that transaction (by `actor`)."""
    def work(conn: Connection) -> int:
        changed = 0
        for kind in SEALED:
            for owner, value in kind.read_all(conn):
                if MasterKeys.sealed_key_id(value) == master_keys.primary_id:
                    continue
                plaintext = master_keys.open(value, kind.purpose(owner))
                kind.store(conn, owner, master_keys.seal(plaintext, kind.purpose(owner)))
                changed += 1
        if clock is not None:
            audit.record(conn, int(clock.now()), audit.EventType.KEY_ROTATED, actor,
                         detail={"step": "reseal", "keyId": master_keys.primary_id, "resealed": changed})
        return changed
    return await db.transaction(work)

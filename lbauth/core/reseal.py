"""Master key rotation for what is sealed at rest (contract section 8; tools/rotate_master_key.py):
count the values sealed under each master key, and re-seal them under the first one."""

from __future__ import annotations

import collections

from sqlalchemy import Connection, select, update

from lbauth.core.apps import webhook_secret_purpose
from lbauth.core.keys import signing_key_purpose
from lbauth.core.masterkey import MasterKeys
from lbauth.storage.db import Database
from lbauth.storage.models import apps, signing_keys

# Every sealed column: (table, key column, sealed column, the purpose each value is bound to).
SEALED = (
    (apps, apps.c.id, apps.c.webhook_secret_sealed, webhook_secret_purpose),
    (signing_keys, signing_keys.c.kid, signing_keys.c.private_key_sealed, signing_key_purpose),
)


async def sealed_counts(db: Database) -> dict[str, int]:
    """How many stored values each master key id seals."""
    def work(conn: Connection) -> dict[str, int]:
        counts: collections.Counter[str] = collections.Counter()
        for _, _, column, _ in SEALED:
            for value in conn.execute(select(column)).scalars():
                counts[MasterKeys.sealed_key_id(value)] += 1
        return dict(counts)
    return await db.read(work)


async def reseal_all(db: Database, master_keys: MasterKeys) -> int:
    """Open every sealed value with whichever configured key sealed it and seal it again under the
    first key, in one transaction; returns how many changed."""
    def work(conn: Connection) -> int:
        changed = 0
        for table, key, column, purpose in SEALED:
            for row_key, value in conn.execute(select(key, column)).all():
                if MasterKeys.sealed_key_id(value) == master_keys.primary_id:
                    continue
                plaintext = master_keys.open(value, purpose(row_key))
                conn.execute(update(table).where(key == row_key)
                             .values({column.name: master_keys.seal(plaintext, purpose(row_key))}))
                changed += 1
        return changed
    return await db.transaction(work)

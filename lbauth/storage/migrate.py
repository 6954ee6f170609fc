"""Schema migrations through Alembic (contract section 1).

Alembic's stock async env.py calls asyncio.run(), which cannot run inside Tornado's loop, so we
open the connection ourselves and run Alembic's synchronous commands on it via run_sync.
"""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text

from lbauth.storage.db import Database

MIGRATIONS = Path(__file__).parent / "migrations"
DEFAULT_SIGNING_ALG = "ES256"  # lbauth.settings.Settings.signing_alg's default
_PG_LOCK = 0x6C6261757468  # "lbauth": one migrator at a time on a shared PostgreSQL database


class SchemaOutOfDate(Exception):
    """The database schema is not the one this version of lbauth needs."""


def _config(connection: Connection | None = None, signing_alg: str = DEFAULT_SIGNING_ALG) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.attributes["connection"] = connection
    # LBAUTH_SIGNING_ALG, for a migration that must tell which key signs access tokens (0006).
    config.attributes["signing_alg"] = signing_alg
    return config


@functools.cache
def head_revision() -> str:
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None  # migrations/versions is never empty
    return head


def _current(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


async def current_revision(db: Database) -> str | None:
    return await db.read(_current)


async def upgrade(db: Database, signing_alg: str = DEFAULT_SIGNING_ALG) -> tuple[str | None, str]:
    """Bring the schema to the head revision; returns (before, after). `signing_alg`: the
    deployment's LBAUTH_SIGNING_ALG."""
    def work(connection: Connection) -> tuple[str | None, str]:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK})
        before = _current(connection)
        if before == head_revision():  # up to date: every start but the first after a release
            return before, before
        command.upgrade(_config(connection, signing_alg), "head")
        after = _current(connection)
        assert after is not None  # upgraded to the head revision
        return before, after
    return await db.transaction(work)


async def check(db: Database) -> None:
    """Raise SchemaOutOfDate, with what to do, unless the schema is at the head revision."""
    current, head = await current_revision(db), head_revision()
    if current == head:
        return
    if current is None:
        raise SchemaOutOfDate(f"the database has no lbauth schema; run `lbauth db upgrade` (needs revision {head})")
    known = {rev.revision for rev in ScriptDirectory.from_config(_config()).walk_revisions()}
    if current not in known:
        raise SchemaOutOfDate(f"the database schema is at revision {current}, newer than this lbauth "
                              f"(head {head}); upgrade lbauth")
    raise SchemaOutOfDate(f"the database schema is at revision {current}, this lbauth needs {head}; "
                          "run `lbauth db upgrade`")

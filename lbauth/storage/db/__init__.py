"""The storage boundary: units of work, each run in one transaction (docs/architecture.md,
"Storage: transactions, the queue and outages").

A use case hands `Database.transaction` a plain function of a SQLAlchemy `Connection` that does
all its reads and writes and no other I/O; it never commits (the database does). `open_database`
returns the SQLite or the PostgreSQL implementation of the one `Database` protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from lbauth.storage.db.postgres import PostgresDatabase
from lbauth.storage.db.sqlite import SQLiteDatabase
from lbauth.storage.db.unit import (
    READY_TIMEOUT_SECONDS,
    RETRY_AFTER_SECONDS,
    CommitThenRaise,
    is_connection_lost,
    is_unavailable,
)

T = TypeVar("T")

__all__ = ["READY_TIMEOUT_SECONDS", "RETRY_AFTER_SECONDS", "CommitThenRaise", "Database", "PostgresDatabase",
           "SQLiteDatabase", "is_connection_lost", "is_unavailable", "open_database"]


class Database(Protocol):
    """What core sees of a database."""

    url: str
    is_sqlite: bool
    statements: int  # SQL statements sent so far, for the statement budgets and `make bench`
    up: bool  # False while the database is unreachable (PostgreSQL)

    async def transaction(self, work: Callable[..., T], *args: Any, readonly: bool = False,
                          single_statement: bool = False, first: bool = False, **kwargs: Any) -> T:
        """`work(connection, *args, **kwargs)` in one transaction: committed if it returns,
        committed and then its error raised if it raises CommitThenRaise, rolled back if it raises
        anything else. An unreachable database is `ServerUnavailable` (503, Retry-After).
        `readonly`: it only reads; `single_statement`: it sends one statement (PostgreSQL then
        runs it in autocommit); `first`: ahead of the requests waiting for a connection."""
        ...

    async def read(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`transaction(work, ..., readonly=True)`."""
        ...

    async def ping(self, timeout: float = READY_TIMEOUT_SECONDS) -> bool:
        """True when the database answers a trivial query within `timeout` seconds (/readyz)."""
        ...

    async def checkpoint(self) -> None:
        """Periodic upkeep off the event loop (SQLite: copy the WAL back into the database file)."""
        ...

    async def erase_freed(self) -> None:
        """After personal data was erased (contract 16): make it leave the bytes at rest (SQLite:
        the freed space is zeroed by secure_delete; the WAL's old pages are checkpointed and truncated)."""
        ...

    async def close(self) -> None:
        ...


def open_database(url: str, **options: Any) -> Database:
    """The database at `url` (`sqlite+aiosqlite:///...` or `postgresql+asyncpg://...`); connections
    are made when first needed. `options`: `pool_size` (PostgreSQL)."""
    if url.startswith("sqlite"):
        return SQLiteDatabase(url, **options)
    return PostgresDatabase(url, **options)

"""The storage boundary: units of work run in one transaction each.

A use case hands `Database.transaction` a plain function of a SQLAlchemy `Connection` that does
all its reads and writes; the function never commits (the caller owns the transaction) and does
no other I/O, so no transaction is ever held open across a network call.

- PostgreSQL: the async engine (asyncpg); the function runs through `AsyncConnection.run_sync`.
- SQLite: the function runs on the event loop's own thread, on one connection of SQLAlchemy's
  synchronous engine kept open for the process. A unit of work is a few statements against a
  local file (tens of microseconds); a hop to a worker thread costs more than that. Nothing on
  this path blocks: the loop's connection has no busy timeout; a write that finds another
  process holding the write lock yields to the loop and tries again, and a read that meets
  SQLITE_BUSY (rare in WAL mode) runs on a worker thread that may wait. WAL checkpoints, which
  write back and fsync, run off the loop too (`checkpoint`). aiosqlite, the async engine, is
  kept for migrations.
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from lbauth.errors import ServerUnavailable

T = TypeVar("T")

RETRY_AFTER_SECONDS = 5
SQLITE_READERS = 2
SQLITE_WRITE_WAIT = 5.0
# How long a request waits for the database before it answers 503 instead of hanging: a pool
# connection at most POOL_TIMEOUT_SECONDS, then, if the one it got must be made anew (the database
# went away and the pool was invalidated), a connect attempt at most CONNECT_TIMEOUT_SECONDS.
# Together 0.6 s, leaving room for a loaded event loop: an outage is answered with 503 within
# 1 s (issue 8), even when every pooled connection died at once and many requests arrive
# together. A local or same-zone connect takes milliseconds.
CONNECT_TIMEOUT_SECONDS = 0.35
POOL_TIMEOUT_SECONDS = 0.25
READY_TIMEOUT_SECONDS = 0.9  # /readyz and /metrics: "not ready" rather than a slow answer

_READONLY = "lbauth_readonly"


class _WouldWait(Exception):
    """SQLite is busy; the unit of work goes to a thread that may wait."""


def _is_busy(exc: sa_exc.OperationalError) -> bool:
    return "locked" in str(exc.orig) or "busy" in str(exc.orig)


def is_unavailable(exc: BaseException) -> bool:
    """True when `exc` means the database cannot be reached, not that the request was wrong."""
    if isinstance(exc, sa_exc.DBAPIError):
        return exc.connection_invalidated or isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
    return isinstance(exc, OSError | TimeoutError | sa_exc.TimeoutError | ConnectionError)


class Database:
    def __init__(self, url: str, *, pool_size: int = 16) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        self.statements = 0  # SQL statements sent, for the statement budgets and `make bench`
        if self.is_sqlite:
            path = make_url(url).database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                # Created private; SQLite gives its -wal and -shm files the same mode.
                os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
            self.engine: AsyncEngine = create_async_engine(url, pool_size=pool_size,
                                                           pool_timeout=POOL_TIMEOUT_SECONDS)
            sync_url = make_url(url).set(drivername="sqlite")
            # The loop's own connection: never waits (busy timeout 0), never checkpoints.
            self._loop_engine: Engine | None = create_engine(
                sync_url, pool_size=1, max_overflow=0, pool_reset_on_return=None,
                connect_args={"check_same_thread": False, "timeout": 0})
            self._listen(self._loop_engine, busy_timeout_ms=0, autocheckpoint=False)
            self._loop_conn: Connection | None = None
            # Worker threads, which may wait: reads that met SQLITE_BUSY, and checkpoints.
            self.sync_engine: Engine | None = create_engine(
                sync_url, pool_size=SQLITE_READERS, max_overflow=0, pool_timeout=POOL_TIMEOUT_SECONDS,
                pool_reset_on_return=None, connect_args={"check_same_thread": False, "timeout": 5})
            self._threads: ThreadPoolExecutor | None = ThreadPoolExecutor(SQLITE_READERS,
                                                                          thread_name_prefix="lbauth-sqlite")
            self._listen(self.sync_engine)
        else:
            # Every transaction ends in COMMIT or ROLLBACK here, so the pool's reset-on-return
            # rollback would be one more round trip for nothing. No overflow: an overflow
            # connection is closed when returned, so a burst would open (and TLS-negotiate) a new
            # connection per request; requests beyond the pool wait their turn instead.
            self.engine = create_async_engine(
                url, pool_size=pool_size, max_overflow=0, pool_timeout=POOL_TIMEOUT_SECONDS,
                pool_reset_on_return=None,
                connect_args={"timeout": CONNECT_TIMEOUT_SECONDS, "command_timeout": 30})
            self.sync_engine, self._threads, self._loop_engine, self._loop_conn = None, None, None, None
        self._listen(self.engine.sync_engine)

    def _listen(self, sync_engine: Engine, busy_timeout_ms: int = 5000, autocheckpoint: bool = True) -> None:

        @event.listens_for(sync_engine, "before_cursor_execute")
        def count(conn, cursor, statement, parameters, context, executemany):  # noqa: ANN001
            if not statement.startswith(("BEGIN", "COMMIT", "ROLLBACK")):
                self.statements += 1

        if not self.is_sqlite:
            return

        @event.listens_for(sync_engine, "connect")
        def on_connect(dbapi_connection, connection_record):  # noqa: ANN001
            # We issue BEGIN ourselves (below), so the driver's own transaction handling is off.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            pragmas = ["journal_mode=WAL", "foreign_keys=ON", f"busy_timeout={busy_timeout_ms}", "synchronous=NORMAL"]
            if not autocheckpoint:
                pragmas.append("wal_autocheckpoint=0")
            for pragma in pragmas:
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

        @event.listens_for(sync_engine, "begin")
        def on_begin(conn: Connection) -> None:
            # A writer takes the write lock up front: a deferred transaction that reads and then
            # writes can fail at once with SQLITE_BUSY instead of waiting out the busy timeout.
            readonly = conn.get_execution_options().get(_READONLY, False)
            conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")

    async def transaction(self, work: Callable[..., T], *args: Any, readonly: bool = False,
                          single_statement: bool = False, **kwargs: Any) -> T:
        """Run `work(connection, *args, **kwargs)` in one transaction: committed if it returns, rolled
        back if it raises. An unreachable database becomes `ServerUnavailable` (503, Retry-After).

        `readonly`, or `single_statement` (the work sends one statement on PostgreSQL), lets
        PostgreSQL run it in autocommit: the statement is its own transaction, with no BEGIN and
        COMMIT round trips."""
        if kwargs:
            work = functools.partial(work, **kwargs)
        if self._threads is not None:
            try:
                return await self._sqlite_transaction(work, args, readonly)
            except Exception as exc:
                if is_unavailable(exc):
                    raise self._unavailable() from exc
                raise
        conn = self.engine.connect()
        try:
            await conn.start()
        except Exception as exc:  # any failure to get a connection: the database is not there
            raise self._unavailable() from exc
        try:
            if readonly or single_statement:
                await conn.execution_options(isolation_level="AUTOCOMMIT", **{_READONLY: readonly})
            async with conn.begin():
                return await conn.run_sync(work, *args)
        except Exception as exc:
            if is_unavailable(exc):
                raise self._unavailable() from exc
            raise
        finally:
            await conn.close()

    async def _sqlite_transaction(self, work: Callable[..., T], args: tuple, readonly: bool) -> T:
        """On the loop's connection. While another process holds the write lock, a write yields to
        the loop and tries again every fraction of a millisecond, for up to SQLITE_WRITE_WAIT
        seconds (SQLite's own busy handler sleeps in steps of up to 100 ms, which set the p99 of
        every write); a read that meets SQLITE_BUSY runs on a thread that may wait."""
        deadline, pause = time.monotonic() + SQLITE_WRITE_WAIT, 0.0
        while True:
            try:
                return self._on_loop(work, args, readonly)
            except _WouldWait as busy:
                if readonly:
                    break
                if time.monotonic() > deadline:
                    raise busy.__cause__ from None
            await asyncio.sleep(pause)
            pause = min(pause * 2 or 0.0001, 0.004)
        return await asyncio.get_running_loop().run_in_executor(self._threads, self._read_in_thread, work, args)

    def _on_loop(self, work: Callable[..., T], args: tuple, readonly: bool) -> T:
        """The unit of work on the loop's connection, or `_WouldWait` (before any effect) when
        SQLite is busy: another process holds the write lock."""
        conn = self._loop_conn
        if conn is None or conn.closed or conn.invalidated:
            conn = self._loop_conn = self._loop_engine.connect()
        conn.execution_options(**{_READONLY: readonly})
        try:
            transaction = conn.begin()
        except sa_exc.OperationalError as exc:
            if _is_busy(exc):
                conn.rollback()
                raise _WouldWait from exc
            raise
        try:
            result = work(conn, *args)
        except sa_exc.OperationalError as exc:
            transaction.rollback()
            if readonly and _is_busy(exc):  # a read has no effect to undo: run it where it may wait
                raise _WouldWait from exc
            raise
        except BaseException:
            transaction.rollback()
            raise
        transaction.commit()
        return result

    async def checkpoint(self) -> None:
        """SQLite: copy the WAL back into the database file (and fsync) on a worker thread; the
        loop's connection never does it. Run periodically by the server. PostgreSQL: nothing."""
        if self._threads is not None:
            def passive() -> None:
                # Outside any transaction (a SQLAlchemy connection would BEGIN first); PASSIVE
                # never waits for readers or writers.
                raw = self.sync_engine.raw_connection()
                try:
                    raw.driver_connection.execute("PRAGMA wal_checkpoint(PASSIVE)").close()
                finally:
                    raw.close()
            await asyncio.get_running_loop().run_in_executor(self._threads, passive)

    def _read_in_thread(self, work: Callable[..., T], args: tuple) -> T:
        with self.sync_engine.connect() as conn:
            conn = conn.execution_options(**{_READONLY: True})
            with conn.begin():
                return work(conn, *args)

    @staticmethod
    def _unavailable() -> ServerUnavailable:
        return ServerUnavailable(headers={"Retry-After": str(RETRY_AFTER_SECONDS)})

    async def read(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.transaction(work, *args, readonly=True, **kwargs)

    async def ping(self, timeout: float = READY_TIMEOUT_SECONDS) -> bool:
        """True when the database answers a trivial query within `timeout` seconds."""
        try:
            await asyncio.wait_for(self.read(lambda conn: conn.execute(text("SELECT 1")).scalar()), timeout)
        except (ServerUnavailable, TimeoutError):
            return False
        return True

    async def close(self) -> None:
        await self.engine.dispose()
        if self.sync_engine is not None:
            if self._loop_conn is not None:
                self._loop_conn.close()
            self._loop_engine.dispose()
            self._threads.shutdown(wait=True)
            self.sync_engine.dispose()

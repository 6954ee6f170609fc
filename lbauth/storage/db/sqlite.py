"""SQLite: units of work on the event loop's own thread, on one connection per process that never
waits, with statements sent straight to the DB-API cursor once SQLAlchemy has compiled them
(docs/architecture.md, "Storage: transactions, the queue and outages")."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from lbauth.errors import ServerUnavailable
from lbauth.storage.db.plans import Plan, PlannedConnection, Plans
from lbauth.storage.db.unit import (
    READY_TIMEOUT_SECONDS,
    counts_statements,
    is_unavailable,
    outcome,
    run_unit,
    select_one,
    unavailable,
)

log = logging.getLogger("lbauth.storage")
T = TypeVar("T")

SQLITE_READERS = 2
SQLITE_WRITE_WAIT = 5.0
QUEUE_WAIT_SECONDS = 5.0


class _WouldWait(Exception):  # noqa: N818 - a signal, not an error
    """SQLite is busy (another process holds the write lock): try again, or on a thread that may
    wait. `busy` is the error to raise if the wait ends without a turn."""

    def __init__(self, busy: BaseException) -> None:
        super().__init__()
        self.busy = busy

    def error(self) -> BaseException:
        if isinstance(self.busy, sqlite3.Error):  # wrapped only now: waits are retried often
            return sa_exc.DBAPIError.instance("BEGIN IMMEDIATE", (), self.busy, sqlite3.Error)
        return self.busy


def _is_busy(exc: BaseException) -> bool:
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) else exc
    return "locked" in str(orig) or "busy" in str(orig)


class SQLiteDatabase:
    """The `Database` protocol on SQLite: one file, one writer at a time across processes."""

    is_sqlite = True
    up = True  # a local file has no connection to lose

    def __init__(self, url: str, **_pool: Any) -> None:
        self.url = url
        self.statements = 0  # SQL statements sent, for the statement budgets and `make bench`
        self.plans = Plans()  # statements sent straight to the driver (storage/db/plans.py)
        path = make_url(url).database
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # Created private; SQLite gives its -wal and -shm files the same mode.
            os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        sync_url = make_url(url).set(drivername="sqlite")
        # The loop's own connection: never waits (busy timeout 0), never checkpoints.
        self._loop_engine = create_engine(
            sync_url, pool_size=1, max_overflow=0, pool_reset_on_return=None,
            connect_args={"check_same_thread": False, "timeout": 0})
        self._configure(self._loop_engine, busy_timeout_ms=0, autocheckpoint=False)
        self._loop_conn: LoopConnection | None = None
        # Worker threads, which may wait: reads that met SQLITE_BUSY, and checkpoints.
        self.sync_engine = create_engine(
            sync_url, pool_size=SQLITE_READERS, max_overflow=0, pool_timeout=QUEUE_WAIT_SECONDS,
            pool_reset_on_return=None, connect_args={"check_same_thread": False, "timeout": 5})
        self._configure(self.sync_engine)
        self._threads = ThreadPoolExecutor(SQLITE_READERS, thread_name_prefix="lbauth-sqlite")
        self._erase_pending = False  # erased data may still be in the WAL (erase_freed)

        @event.listens_for(self.sync_engine, "begin")
        def on_begin(conn: Connection) -> None:  # the driver's own transaction handling is off
            conn.exec_driver_sql("BEGIN")

    def _configure(self, engine: Engine, busy_timeout_ms: int = 5000, autocheckpoint: bool = True) -> None:

        @event.listens_for(engine, "before_cursor_execute")
        def count(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
            if counts_statements(statement):
                self.statements += 1

        @event.listens_for(engine, "connect")
        def on_connect(dbapi_connection: Any, connection_record: Any) -> None:
            # We issue BEGIN ourselves, so the driver's own transaction handling is off.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            pragmas = ["journal_mode=WAL", "foreign_keys=ON", f"busy_timeout={busy_timeout_ms}", "synchronous=NORMAL",
                       "secure_delete=ON"]  # erased data is overwritten, not just unlinked (contract 16)
            if not autocheckpoint:
                pragmas.append("wal_autocheckpoint=0")
            for pragma in pragmas:
                cursor.execute(f"PRAGMA {pragma}")
            cursor.close()

    async def transaction(self, work: Callable[..., T], *args: Any, readonly: bool = False,
                          single_statement: bool = False, first: bool = False, **kwargs: Any) -> T:
        """`work(connection, *args, **kwargs)` in one transaction: committed if it returns (or raises
        CommitThenRaise), rolled back if it raises. Runs on the loop's connection; a write that finds
        another process writing yields to the loop and tries again, a read meeting SQLITE_BUSY runs
        on a thread that may wait. `single_statement` and `first` matter only on PostgreSQL."""
        if kwargs:
            work = functools.partial(work, **kwargs)
        try:
            try:
                result = self._on_loop(work, args, readonly)
            except _WouldWait as busy:
                result = await self._wait_turn(work, args, readonly, busy)
        except Exception as exc:
            if is_unavailable(exc):
                raise unavailable() from exc
            raise
        return outcome(result)

    async def read(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.transaction(work, *args, readonly=True, **kwargs)

    async def _wait_turn(self, work: Callable[..., T], args: tuple, readonly: bool, busy: _WouldWait) -> T:
        """A write retries every fraction of a millisecond for up to SQLITE_WRITE_WAIT seconds
        (SQLite's own busy handler sleeps in steps of up to 100 ms); a read goes to a thread."""
        if readonly:
            return await asyncio.get_running_loop().run_in_executor(self._threads, self._read_in_thread, work, args)
        deadline, pause = time.monotonic() + SQLITE_WRITE_WAIT, 0.0
        while True:
            if time.monotonic() > deadline:
                raise busy.error() from None
            await asyncio.sleep(pause)
            pause = min(pause * 2 or 0.0001, 0.004)
            try:
                return self._on_loop(work, args, readonly)
            except _WouldWait as again:
                busy = again

    def _on_loop(self, work: Callable[..., T], args: tuple, readonly: bool) -> T:
        """The unit of work on the loop's connection, or `_WouldWait` (before any effect) when
        another process holds the write lock."""
        conn = self._loop_conn
        if conn is None or conn.closed or conn.invalidated:
            if conn is not None:
                conn.close()  # an invalidated connection goes back to the pool to be discarded
            conn = self._loop_conn = LoopConnection(self._loop_engine, self)
        try:
            # A writer takes the write lock up front: a deferred transaction that reads and then
            # writes can fail at once with SQLITE_BUSY instead of waiting out the busy timeout.
            conn.dbapi.execute("BEGIN" if readonly else "BEGIN IMMEDIATE").close()
        except sqlite3.Error as exc:
            if _is_busy(exc):
                raise _WouldWait(exc) from None
            raise conn.wrap(exc, "BEGIN", ()) from exc
        try:
            result = run_unit(conn, work, args)
        except sa_exc.OperationalError as exc:
            conn.end(commit=False)
            if readonly and _is_busy(exc):  # a read has no effect to undo: run it where it may wait
                raise _WouldWait(exc) from exc
            raise
        except BaseException:
            conn.end(commit=False)
            raise
        conn.end(commit=True)
        return result

    def _read_in_thread(self, work: Callable[..., T], args: tuple) -> T:
        with self.sync_engine.connect() as conn, conn.begin():
            return run_unit(conn, work, args)

    async def checkpoint(self) -> None:
        """Copy the WAL back into the database file (and fsync) on a worker thread; the loop's
        connection never does it. Run periodically by the server. While erased data may still sit
        in the WAL (`erase_freed` could not truncate it), every run tries to truncate it again."""
        if self._erase_pending:
            await self.erase_freed(attempts=1)
            return
        await asyncio.get_running_loop().run_in_executor(self._threads, self._wal_checkpoint, "PASSIVE")

    def _wal_checkpoint(self, mode: str) -> bool:
        """Outside any transaction (a SQLAlchemy connection would BEGIN first). PASSIVE never waits
        for readers or writers; TRUNCATE waits (the busy timeout) and may still find readers: False."""
        raw = self.sync_engine.raw_connection()
        try:
            cursor = raw.driver_connection.execute(f"PRAGMA wal_checkpoint({mode})")  # type: ignore[union-attr]
            busy = cursor.fetchone()[0]
            cursor.close()
            return not busy
        finally:
            raw.close()

    async def erase_freed(self, attempts: int = 20) -> None:
        """Checkpoint the whole WAL into the database file and truncate it, so no old page (with
        data since erased) stays in it. TRUNCATE waits for readers: tried for a few seconds, then
        left to the periodic checkpoint, which retries it until it succeeds (with a warning)."""
        self._erase_pending = True
        for attempt in range(attempts):
            if attempt:
                await asyncio.sleep(0.25)
            if await asyncio.get_running_loop().run_in_executor(self._threads, self._wal_checkpoint, "TRUNCATE"):
                self._erase_pending = False
                return
        log.warning("the SQLite WAL could not be truncated after an erasure (readers held it); "
                    "the periodic checkpoint will try again")

    async def ping(self, timeout: float = READY_TIMEOUT_SECONDS) -> bool:
        """True when the database answers a trivial query."""
        try:
            await asyncio.wait_for(self.read(select_one), timeout)
        except (ServerUnavailable, TimeoutError):
            return False
        return True

    async def close(self) -> None:
        if self._loop_conn is not None:
            self._loop_conn.close()
        self._loop_engine.dispose()
        self._threads.shutdown(wait=True)
        self.sync_engine.dispose()


class LoopConnection(PlannedConnection):
    """The connection units of work get on the event loop: planned statements go straight to the
    DB-API cursor (storage/db/plans.py)."""

    def __init__(self, engine: Engine, database: SQLiteDatabase) -> None:
        super().__init__(engine, database)
        self.dbapi: sqlite3.Connection = self.connection.dbapi_connection  # type: ignore[assignment]

    def send(self, plan: Plan, values: list) -> tuple[list, int]:
        try:
            cursor = self.dbapi.execute(plan.sql, values)
        except sqlite3.Error as exc:
            raise self.wrap(exc, plan.sql, values) from exc
        try:
            rows = cursor.fetchall() if plan.metadata is not None else []
            return rows, cursor.rowcount
        except sqlite3.Error as exc:
            raise self.wrap(exc, plan.sql, values) from exc
        finally:
            cursor.close()

    def wrap(self, error: Exception, statement: str, parameters: Any) -> Exception:
        """A DB-API error as SQLAlchemy raises it (IntegrityError, OperationalError, ...)."""
        invalidated = self.dialect.is_disconnect(error, self.connection, None)  # type: ignore[arg-type]
        if invalidated:
            self.invalidate(error)
        return sa_exc.DBAPIError.instance(statement, parameters, error, sqlite3.Error,
                                          connection_invalidated=invalidated, dialect=self.dialect)

    def end(self, *, commit: bool) -> None:
        """COMMIT or ROLLBACK, through SQLAlchemy if it began a transaction of its own around a
        statement it ran."""
        if self.invalidated:
            return
        try:
            if self.in_transaction():
                self.commit() if commit else self.rollback()
            else:
                self.dbapi.commit() if commit else self.dbapi.rollback()
        except sqlite3.Error as exc:
            if commit:
                self.dbapi.rollback()
            raise self.wrap(exc, "COMMIT" if commit else "ROLLBACK", ()) from exc

"""PostgreSQL: units of work on a pool of asyncpg connections behind a first-come queue, a DOWN
state with a reconnecting probe, and a watchdog that tells a partition from a slow database
(contract section 3; docs/architecture.md, "Storage: transactions, the queue and outages")."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import asyncpg
from sqlalchemy import Engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.util import await_, greenlet_spawn

from lbauth.errors import ServerUnavailable
from lbauth.storage.db.plans import Plan, PlannedConnection, Plans
from lbauth.storage.db.unit import (
    READY_TIMEOUT_SECONDS,
    counts_statements,
    is_connection_lost,
    is_unavailable,
    outcome,
    run_unit,
    select_one,
    unavailable,
)
from lbauth.storage.listen import asyncpg_dsn, close_quietly

T = TypeVar("T")

POOL_SIZE = 16
# A busy pool queues: a request waits up to this long for a pooled connection (contract section 3).
QUEUE_WAIT_SECONDS = 5.0
# A new connection that takes longer means an unreachable database: a request that meets an
# outage is answered 503 within about this long (the contract allows 1 s).
CONNECT_TIMEOUT_SECONDS = 0.5
# Until a process has reached its database once, a slow connect is a host busy starting up (a
# deploy, a loaded CI machine), not an outage: it waits this long for its first connection.
FIRST_CONNECT_SECONDS = QUEUE_WAIT_SECONDS
PROBE_SECONDS = 0.5  # while the database is down, how often the probe tries to reconnect
# Units of work in flight and none finished for this long: is PostgreSQL still there? With a check
# of at most CONNECT_TIMEOUT_SECONDS and the watchdog's tick, a unit that meets a partition ends
# within about 0.75 s (the contract allows 1 s).
STALL_SECONDS = 0.2
WATCH_SECONDS = 0.05  # the watchdog's tick, while units of work are in flight

log = logging.getLogger("lbauth.db")


class _Queue:
    """Admission to the pool: `size` places and a first-come queue of requests waiting for one;
    a place means a pooled connection is free. Waits end at their deadline through `expire`,
    called by the watchdog's tick, or all at once through `fail_all` (the database went down)."""

    def __init__(self, size: int) -> None:
        self.free = size
        self.waiting: deque[tuple[asyncio.Future, float]] = deque()

    async def enter(self, timeout: float, first: bool = False) -> None:
        """A place, waiting up to about `timeout` seconds (then TimeoutError); `first` goes ahead of
        the queue (the check-list refresh and health probes, which load must not starve)."""
        if self.free > 0 and not self.waiting:
            self.free -= 1
            return
        loop = asyncio.get_running_loop()
        place = loop.create_future()
        waiter = (place, loop.time() + timeout)
        if first:
            self.waiting.appendleft(waiter)
        else:
            self.waiting.append(waiter)
        try:
            await place
        except BaseException:
            if place.done() and not place.cancelled() and place.exception() is None:
                self.leave()  # given a place just as it stopped waiting: hand it on
            elif not place.done():
                self.waiting.remove(waiter)
            raise

    def leave(self) -> None:
        while self.waiting:
            place, _ = self.waiting.popleft()
            if not place.done():
                place.set_result(None)
                return
        self.free += 1

    def expire(self, now: float) -> None:
        """End with TimeoutError the waits whose deadline (loop time) has passed."""
        if self.waiting and any(deadline <= now for _, deadline in self.waiting):
            kept: deque[tuple[asyncio.Future, float]] = deque()
            for place, deadline in self.waiting:
                if place.done():
                    continue
                if deadline <= now:
                    place.set_exception(TimeoutError())
                else:
                    kept.append((place, deadline))
            self.waiting = kept

    def fail_all(self, error: Callable[[], BaseException]) -> None:
        while self.waiting:
            place, _ = self.waiting.popleft()
            if not place.done():
                place.set_exception(error())


class PostgresDatabase:
    """The `Database` protocol on PostgreSQL (asyncpg through SQLAlchemy's async engine)."""

    is_sqlite = False

    def __init__(self, url: str, *, pool_size: int = POOL_SIZE) -> None:
        self.url = url
        self.statements = 0  # SQL statements sent, for the statement budgets and `make bench`
        self.plans = Plans()  # statements sent straight to the driver (storage/db/plans.py)
        self.up = True  # False from a connection failure until the probe reconnects
        self._reached = False  # a connection was made once: only then is losing it news for the log
        self._queue = _Queue(pool_size)
        self._probe: asyncio.Task | None = None
        # The watchdog's bookkeeping: the connections of the units of work in flight, the units
        # still connecting, the database's answers so far (units finished, connections made), and
        # the tick (a timer, armed only while units are in flight or connecting).
        self._in_flight: set[UnitConnection] = set()
        self._connecting = 0
        self._finished = 0
        self._finished_seen = 0
        self._quiet_since = 0.0
        self._watch: asyncio.TimerHandle | None = None
        self._liveness: asyncio.Task | None = None
        # Every transaction ends in COMMIT or ROLLBACK here, so the pool's reset-on-return rollback
        # would be one more round trip for nothing. No overflow: an overflow connection is closed
        # when returned, so a burst would open a new connection per request; requests beyond the
        # pool wait in `_queue`, which admits no more than the pool holds.
        # Units of work send BEGIN and COMMIT themselves (UnitConnection): the driver is in autocommit.
        self.engine = create_async_engine(
            url, pool_size=pool_size, max_overflow=0, pool_timeout=QUEUE_WAIT_SECONDS, pool_reset_on_return=None,
            isolation_level="AUTOCOMMIT", connect_args={"command_timeout": 30})

        @event.listens_for(self.engine.sync_engine, "do_connect")
        def patience(dialect: Any, record: Any, cargs: Any, cparams: dict) -> None:
            cparams["timeout"] = self._connect_timeout()

        @event.listens_for(self.engine.sync_engine, "connect")
        def connected(dbapi_connection: Any, record: Any) -> None:
            self._finished += 1  # a new connection is an answer too: progress, for the watchdog

        @event.listens_for(self.engine.sync_engine, "before_cursor_execute")
        def count(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
            if counts_statements(statement):
                self.statements += 1

    async def transaction(self, work: Callable[..., T], *args: Any, readonly: bool = False,
                          single_statement: bool = False, first: bool = False, **kwargs: Any) -> T:
        """`work(connection, *args, **kwargs)` in one transaction: committed if it returns (or raises
        CommitThenRaise), rolled back if it raises; an unreachable database is ServerUnavailable.
        `readonly` or `single_statement` runs it in autocommit (no BEGIN and COMMIT round trips);
        `first` puts it ahead of the requests waiting for a connection."""
        if kwargs:
            work = functools.partial(work, **kwargs)
        if not self.up:
            raise unavailable()
        try:
            await self._queue.enter(QUEUE_WAIT_SECONDS, first)
        except TimeoutError:  # busy for QUEUE_WAIT_SECONDS: the contract's limit
            raise unavailable() from None
        try:
            result = await self._transaction(work, args, readonly or single_statement)
        finally:
            self._queue.leave()
        return outcome(result)

    async def read(self, work: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await self.transaction(work, *args, readonly=True, **kwargs)

    async def _transaction(self, work: Callable[..., T], args: tuple, autocommit: bool) -> T:
        deadline = None
        while True:
            try:
                result = await greenlet_spawn(self._unit, work, args, autocommit)
                break
            except _NoConnection as failed:
                exc = failed.__cause__
                if not isinstance(exc, TimeoutError):  # refused, reset: the database is not there
                    self._went_down(exc or failed)
                    raise unavailable() from exc
                # Slow to connect: an unreachable database, or a burst of new connections on a
                # loaded host? The liveness check decides (the watchdog started it while this unit
                # connected); a database that answers means connect again: a busy database
                # queues, it never answers 503.
                await asyncio.shield(self._check_liveness())
                deadline = deadline or time.monotonic() + QUEUE_WAIT_SECONDS
                if not self.up or time.monotonic() >= deadline:
                    raise unavailable() from exc
            except Exception as exc:
                if is_unavailable(exc):
                    raise unavailable() from exc
                self._finished += 1  # it answered, with an error of this request's own
                raise
        self._finished += 1  # the database answered: progress, for the watchdog
        return result

    def _unit(self, work: Callable[..., T], args: tuple, autocommit: bool) -> T:
        """The whole unit of work in one greenlet, from the pool's checkout to the connection's
        return: BEGIN (unless `autocommit`), the work, COMMIT or ROLLBACK. A lost connection marks
        the database down before the connection is returned: closing one that an outage left
        silent can take seconds, and the requests waiting for a connection must not."""
        if self._watch is None:
            self._watch_from_now()
        self._connecting += 1  # the pool may open a connection: the watchdog watches that too
        try:
            conn = UnitConnection(self.engine.sync_engine, self)
        except Exception as exc:
            raise _NoConnection from exc
        finally:
            self._connecting -= 1
        self._reached = True
        self._in_flight.add(conn)
        try:
            if not autocommit:
                conn.control("BEGIN")
            try:
                result = run_unit(conn, work, args)
            except BaseException:
                conn.end(commit=False, transaction=not autocommit)
                raise
            conn.end(commit=True, transaction=not autocommit)
            return result
        except Exception as exc:
            if is_connection_lost(exc):
                self._went_down(exc)
            raise
        finally:
            self._in_flight.discard(conn)
            conn.close()

    def _watch_from_now(self) -> None:
        self._finished_seen, self._quiet_since = self._finished, time.monotonic()
        self._watch = asyncio.get_running_loop().call_later(WATCH_SECONDS, self._on_watch)

    def _on_watch(self) -> None:
        """The watchdog's tick: expire waits past their deadline; start a liveness check when units
        are in flight or connecting and the database gave no answer for STALL_SECONDS; stop
        ticking when all is quiet."""
        loop = asyncio.get_running_loop()
        self._queue.expire(loop.time())
        busy = self._in_flight or self._connecting
        if not busy and not self._queue.waiting:
            self._watch = None
            return
        now = time.monotonic()
        if self._finished != self._finished_seen:
            self._finished_seen, self._quiet_since = self._finished, now
        elif busy and now - self._quiet_since >= STALL_SECONDS:
            self._check_liveness()
        self._watch = loop.call_later(WATCH_SECONDS, self._on_watch)

    def _check_liveness(self) -> asyncio.Task:
        """Start `_check_stalled`, unless a check is already under way; that check."""
        if self._liveness is None or self._liveness.done():
            self._liveness = asyncio.ensure_future(self._check_stalled())
        return self._liveness

    async def _check_stalled(self) -> None:
        """Slow (do nothing) or cut off (down, and the units in flight end now)? A unit that
        finished or a connection made during the check also proves the database is there."""
        finished = self._finished
        try:
            await self._answers()
        except Exception as exc:  # noqa: BLE001 - whatever it is, PostgreSQL did not answer
            if self._finished != finished:
                return
            self._went_down(exc)
            for conn in list(self._in_flight):  # those that began meanwhile met the same network
                _cut(conn)
        else:
            self._quiet_since = time.monotonic()  # alive: the next check only after another quiet spell

    async def _answers(self) -> None:
        """`SELECT 1` on a fresh connection outside the pool, within `_connect_timeout()`; raises
        if PostgreSQL does not answer. An answer that is an error (too many connections) counts."""
        conn = None
        try:
            async with asyncio.timeout(self._connect_timeout()):
                conn = await asyncpg.connect(asyncpg_dsn(self.url))
                await conn.fetchval("SELECT 1")
        except asyncpg.PostgresError:
            pass
        except BaseException:
            if conn is not None:
                conn.terminate()
            raise
        if conn is not None:
            await close_quietly(conn)

    def _connect_timeout(self) -> float:
        """How long a new connection may take before the database counts as unreachable."""
        return CONNECT_TIMEOUT_SECONDS if self._reached else FIRST_CONNECT_SECONDS

    def _went_down(self, exc: BaseException) -> None:
        """A connection failed: answer 503 at once to every request that needs the database, those
        waiting for a connection too, until the probe gets an answer (contract section 3)."""
        if self.up:
            self.up = False
            # A warning for a server that had the database; a command that never reached it says so
            # in its own one-line error, so this is only info there.
            log.log(logging.WARNING if self._reached else logging.INFO,
                    "the database is unreachable (%s); answering 503 until it answers again", type(exc).__name__)
        self._queue.fail_all(unavailable)
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._reconnect())

    def _came_back(self) -> None:
        if not self.up:
            self.up = True
            log.info("the database answers again")

    async def _reconnect(self) -> None:
        """The probe: every PROBE_SECONDS, a fresh connection's answer, then a trivial query through
        the pool, until one succeeds; then the database is up again, with no restart."""
        while not self.up:
            try:
                await self._answers()
            except Exception:  # noqa: BLE001 - still down
                await asyncio.sleep(PROBE_SECONDS)
                continue
            try:
                await self._queue.enter(QUEUE_WAIT_SECONDS, first=True)
            except TimeoutError:
                continue
            try:
                await self._transaction(select_one, (), True)
            except Exception:  # noqa: BLE001, S110 - still down; the next round tries again
                pass
            else:
                self._came_back()
                return
            finally:
                self._queue.leave()
            await asyncio.sleep(PROBE_SECONDS)

    async def checkpoint(self) -> None:
        """Nothing to do: PostgreSQL checkpoints itself."""

    async def erase_freed(self) -> None:
        """Nothing to do: an updated row's old version is not a live row (contract 16 scans those);
        vacuum reclaims it."""

    async def ping(self, timeout: float = READY_TIMEOUT_SECONDS) -> bool:
        """True when the database answers a trivial query within `timeout` seconds, ahead of the
        queue. While marked down it asks a fresh connection first; an answer ends the outage."""
        if not self.up:
            try:
                await asyncio.wait_for(self._answers(), timeout)
            except Exception:  # noqa: BLE001 - whatever it is, PostgreSQL did not answer
                return False
            self._came_back()
        try:
            await asyncio.wait_for(self.read(select_one, first=True), timeout)
        except (ServerUnavailable, TimeoutError):
            return False
        return True

    async def close(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        for task in (self._probe, self._liveness):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        await self.engine.dispose()


def _cut(conn: UnitConnection) -> None:
    """Abort the socket under a unit of work stuck on an unreachable database: it fails as on a
    lost connection, and SQLAlchemy discards the connection instead of pooling it."""
    if not conn.closed and not conn.invalidated:
        conn.driver.terminate()


class _NoConnection(Exception):  # noqa: N818 - a signal, not an error
    """The pool could not give a connection (its cause says why)."""


_PREPARED = "lbauth_prepared"  # in the pool's per-connection info: (asyncpg connection, {sql: statement})
_PREPARED_MAX = 1_000


class UnitConnection(PlannedConnection):
    """The connection a unit of work gets on PostgreSQL: planned statements go to asyncpg as
    prepared statements (storage/db/plans.py), BEGIN, COMMIT and ROLLBACK straight to the driver.
    The engine's connections are in autocommit, so a statement SQLAlchemy runs on one joins the
    transaction this connection began."""

    def __init__(self, engine: Engine, database: PostgresDatabase) -> None:
        super().__init__(engine, database)
        fairy = self.connection
        self.adapted: Any = fairy.dbapi_connection  # SQLAlchemy's asyncpg adapter
        self.driver: asyncpg.Connection = fairy.driver_connection
        cached = fairy.info.get(_PREPARED)
        if cached is None or cached[0] is not self.driver:
            cached = fairy.info[_PREPARED] = (self.driver, {})
        self._prepared: dict[str, Any] = cached[1]

    def send(self, plan: Plan, values: list) -> tuple[list, int]:
        try:
            statement = self._prepared.get(plan.sql)
            if statement is None:
                if len(self._prepared) >= _PREPARED_MAX:
                    self._prepared.clear()
                statement = self._prepared[plan.sql] = await_(self.driver.prepare(plan.sql))
            rows = await_(statement.fetch(*values))
        except Exception as exc:
            raise self.wrap(exc, plan.sql, values) from exc
        count = statement.get_statusmsg().rpartition(" ")[2]
        return rows, int(count) if count.isdigit() else -1

    def control(self, sql: str) -> None:
        """BEGIN, COMMIT or ROLLBACK."""
        try:
            await_(self.driver.execute(sql))
        except Exception as exc:
            raise self.wrap(exc, sql, ()) from exc

    def end(self, *, commit: bool, transaction: bool) -> None:
        """Close SQLAlchemy's own bookkeeping of a transaction (nothing reaches the driver: it is in
        autocommit), then COMMIT or ROLLBACK the one this connection began. A ROLLBACK that fails
        leaves the connection in an unknown state: it is discarded, not pooled."""
        if self.invalidated:
            return
        if self.in_transaction():
            self.commit() if commit else self.rollback()
        if not transaction:
            return
        if commit:
            self.control("COMMIT")
            return
        try:
            self.control("ROLLBACK")
        except Exception as exc:  # noqa: BLE001 - the unit's own error is the one to raise
            if not self.invalidated:
                self.invalidate(exc)

    def wrap(self, error: BaseException, statement: str, parameters: Any) -> BaseException:
        """An asyncpg error as SQLAlchemy raises it (IntegrityError, OperationalError, ...), the
        connection invalidated when it is lost. Errors that are not the driver's pass unchanged."""
        dbapi = self.dialect.loaded_dbapi
        try:
            self.adapted._handle_exception(error)  # raises the DB-API error SQLAlchemy translates it to
        except dbapi.Error as translated:
            invalidated = self.dialect.is_disconnect(translated, self.adapted, None)
            if invalidated and not self.invalidated:
                self.invalidate(translated)
            return sa_exc.DBAPIError.instance(statement, parameters, translated, dbapi.Error,
                                              connection_invalidated=invalidated, dialect=self.dialect)
        except BaseException as other:  # noqa: BLE001 - not the driver's: as it is
            if self.driver.is_closed() and not self.invalidated:
                self.invalidate(other)
            return other
        return error  # unreachable: _handle_exception always raises


"""PostgreSQL LISTEN on a dedicated connection (a pooled one would keep its listener after being
returned), reconnecting after a failure. Notifications arrive between transactions; what they
announce is then read from the database, so a lost notification costs only latency (polling
covers it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import asyncpg
from sqlalchemy.engine import make_url

log = logging.getLogger("lbauth.listen")

RECONNECT_SECONDS = 2


def asyncpg_dsn(database_url: str) -> str:
    return make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)


async def close_quietly(conn: asyncpg.Connection) -> None:
    """Close politely (a terminated connection leaves a future nobody reads); terminate if stuck."""
    if conn.is_closed():
        return
    try:
        await asyncio.wait_for(conn.close(), 1)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError):
        conn.terminate()


class Listener:
    def __init__(self, database_url: str, channel: str, on_notify: Callable[[], Awaitable[object]]) -> None:
        self.dsn = asyncpg_dsn(database_url)
        self.channel = channel
        self.on_notify = on_notify
        self._task: asyncio.Task | None = None
        self._running: asyncio.Task | None = None
        self._again = False

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while True:
            try:
                conn = await asyncpg.connect(self.dsn, timeout=5)
            except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
                log.warning("LISTEN %s: cannot connect (%s); polling meanwhile", self.channel, type(exc).__name__)
                await asyncio.sleep(RECONNECT_SECONDS)
                continue
            closed = asyncio.Event()
            try:
                conn.add_termination_listener(lambda _conn, closed=closed: closed.set())
                await conn.add_listener(self.channel, self._notified)
                await self.on_notify()  # catch up on what happened while not listening
                await closed.wait()
            except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                log.warning("LISTEN %s failed: %s", self.channel, type(exc).__name__)
            finally:
                await close_quietly(conn)
            await asyncio.sleep(RECONNECT_SECONDS)

    def _notified(self, *_args: object) -> None:
        """A burst of notifications becomes one read, plus one more if more came meanwhile."""
        if self._running and not self._running.done():
            self._again = True
            return
        self._running = asyncio.ensure_future(self._drain())

    async def _drain(self) -> None:
        while True:
            self._again = False
            await self.on_notify()
            if not self._again:
                return

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

"""Starting and stopping one server process: storage ready, keys loaded, HTTP listening,
periodic work scheduled. Used by `lbauth serve` and, in-process, by the tests."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import tornado.httpserver
import tornado.netutil
from tornado.ioloop import PeriodicCallback

from lbauth import logs, metrics
from lbauth.app import cookie_settings, make_app
from lbauth.clock import Clock, SystemClock
from lbauth.core import revocation
from lbauth.core.keys import ensure_active_key, load_keyring
from lbauth.core.masterkey import load_master_keys
from lbauth.delivery import Deliverer
from lbauth.services import Services
from lbauth.settings import Settings
from lbauth.storage import migrate
from lbauth.storage.db import Database
from lbauth.storage.listen import Listener

log = logging.getLogger("lbauth.server")

KEY_RELOAD_SECONDS = 5
CHECKLIST_POLL_SECONDS = 2  # the fallback; PostgreSQL deployments hear revocations at once (NOTIFY)
WEBHOOK_FLUSH_MS = 250
CHECKPOINT_SECONDS = 1  # SQLite: the WAL is copied back off the event loop (storage/db.py)
DRAIN_SECONDS = 5


async def open_database(settings: Settings) -> Database:
    """The database, with its schema current: SQLite migrates itself, PostgreSQL must have been
    upgraded with `lbauth db upgrade` (raises migrate.SchemaOutOfDate otherwise)."""
    db = Database(settings.database_url)
    try:
        if settings.is_sqlite:
            await migrate.upgrade(db)
        else:
            await migrate.check(db)
    except BaseException:
        await db.close()
        raise
    return db


async def build_services(settings: Settings, clock: Clock | None = None) -> Services:
    clock = clock or SystemClock()
    master_keys = load_master_keys(settings)
    db = await open_database(settings)
    try:
        await ensure_active_key(db, clock, master_keys, settings.signing_alg)
        keyring = await load_keyring(db, master_keys)
    except BaseException:
        await db.close()
        raise
    if keyring.signer and keyring.signer.alg != settings.signing_alg:
        log.warning("the active signing key uses %s; signing_alg=%s applies to the next key "
                    "(rotate with tools/rotate_signing_key.py)", keyring.signer.alg, settings.signing_alg)
    services = Services(settings=settings, clock=clock, db=db, master_keys=master_keys, keyring=keyring)
    await services.poll_revocations()
    return services


@dataclass
class RunningServer:
    services: Services
    http_server: tornado.httpserver.HTTPServer
    port: int
    deliverer: Deliverer
    reload_keys: Callable[[], Awaitable[None]]
    listener: Listener | None = None
    periodic: list[PeriodicCallback] = field(default_factory=list)

    async def stop(self) -> None:
        for callback in self.periodic:
            callback.stop()
        self.http_server.stop()
        if self.listener:
            await self.listener.stop()
        try:
            await asyncio.wait_for(self.deliverer.drain(), DRAIN_SECONDS)
        except TimeoutError:
            log.warning("stopping with webhook deliveries in flight; they will be retried when their leases end")
        self.deliverer.close()
        await self.http_server.close_all_connections()
        await self.services.db.close()


async def start(settings: Settings, *, clock: Clock | None = None,
                sockets: list[socket.socket] | None = None) -> RunningServer:
    services = await build_services(settings, clock)
    app = make_app(services)
    server = tornado.httpserver.HTTPServer(app, max_body_size=settings.max_body_bytes,
                                           idle_connection_timeout=60, body_timeout=30)
    if sockets is None:
        sockets = tornado.netutil.bind_sockets(settings.port, settings.host, reuse_port=settings.workers > 1)
    server.add_sockets(sockets)
    port = sockets[0].getsockname()[1]

    async def reload_keys() -> None:
        """Master keys from their file, then the signing key ring: rotations need no restart."""
        if services.reload_master_keys():
            app.settings.update(cookie_settings(services))
            log.info("master keys reloaded: %s", ", ".join(services.master_keys.ids))
        await services.reload_keys()

    deliverer = Deliverer(services)
    running = RunningServer(services, server, port, deliverer, reload_keys)

    running.periodic.append(PeriodicCallback(_guarded(reload_keys), KEY_RELOAD_SECONDS * 1000))
    running.periodic.append(PeriodicCallback(_guarded(services.poll_revocations), CHECKLIST_POLL_SECONDS * 1000))
    running.periodic.append(PeriodicCallback(_guarded(deliverer.run_once), WEBHOOK_FLUSH_MS))
    if settings.is_sqlite:
        running.periodic.append(PeriodicCallback(_guarded(services.db.checkpoint), CHECKPOINT_SECONDS * 1000))
    else:
        running.listener = Listener(settings.database_url, revocation.NOTIFY_CHANNEL,
                                    _guarded(services.poll_revocations))
        running.listener.start()
    for callback in running.periodic:
        callback.start()
    logs.event(log, "listening", host=settings.host, port=port, database=_database_kind(settings),
               env=settings.env)
    return running


def _guarded(job):
    """A periodic job whose failure (say, the database briefly away) is logged once, not fatal:
    the next tick tries again, and recovery is logged too."""
    failing = False

    async def run() -> None:
        nonlocal failing
        try:
            await job()
        except Exception as exc:  # noqa: BLE001 - the next tick tries again
            if not failing:
                log.warning("periodic %s failing: %s; retrying", job.__name__, type(exc).__name__)
            failing = True
        else:
            if failing:
                log.info("periodic %s recovered", job.__name__)
            failing = False
    return run


def _database_kind(settings: Settings) -> str:
    return "sqlite" if settings.is_sqlite else "postgresql"


def serve(settings: Settings) -> None:
    """`lbauth serve`: one process, or `workers` processes that each bind the port themselves
    (SO_REUSEPORT: the kernel spreads connections over them; one shared socket did not scale)."""
    if settings.workers == 1:
        asyncio.run(serve_forever(settings))
        return
    asyncio.run(_prepare_storage(settings))  # migrate and make the first key once, before forking
    metrics.share_between_workers(Path(settings.data_dir) / "metrics")
    supervise(settings)


async def _prepare_storage(settings: Settings) -> None:
    services = await build_services(settings)
    await services.db.close()


def supervise(settings: Settings) -> None:
    """Fork the workers, restart any that dies, and pass SIGTERM/SIGINT on to them."""
    children: dict[int, int] = {}  # pid -> worker number
    stopping = False

    def spawn(number: int) -> None:
        pid = os.fork()
        if pid == 0:  # the worker: its own event loop, database pool, check-list and deliverer
            code = 0
            try:
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                asyncio.run(serve_forever(settings))
            except BaseException:  # noqa: BLE001 - reported, and the supervisor starts another
                log.exception("worker %d failed", number)
                code = 1
            finally:
                os._exit(code)
        children[pid] = number

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for number in range(settings.workers):
        spawn(number)
    logs.event(log, "supervising", workers=settings.workers)
    while children:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            break
        number = children.pop(pid, None)
        metrics.worker_exited(pid)
        if number is not None and not stopping:
            logs.event(log, "worker exited; starting another", level=logging.WARNING, worker=number, status=status)
            time.sleep(1)
            spawn(number)


async def serve_forever(settings: Settings) -> None:
    """Run until SIGINT or SIGTERM, then stop accepting, finish, and close."""
    running = await start(settings)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    await stopping.wait()
    logs.event(log, "stopping")
    await running.stop()

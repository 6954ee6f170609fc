"""Starting and stopping one server process: storage ready, keys loaded, HTTP listening,
periodic work scheduled. Used by `lbauth serve` and, in-process, by the tests."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tornado.httpserver
import tornado.netutil
import tornado.web
from tornado import httputil
from tornado.ioloop import PeriodicCallback
from tornado.log import gen_log

from lbauth import logs, metrics, tracing
from lbauth.app import cookie_settings, make_app
from lbauth.clock import Clock, SystemClock
from lbauth.core.accounts import passwords
from lbauth.core.crypto.keys import KeyRing, ensure_keys, load_keyring
from lbauth.core.crypto.reseal import master_keys_for
from lbauth.delivery import Deliverer
from lbauth.handlers.base import REQUEST_READ
from lbauth.mailer import Mailer
from lbauth.services import Services
from lbauth.settings import Settings
from lbauth.storage import migrate
from lbauth.storage.db import Database, open_database
from lbauth.storage.listen import Listener
from lbauth.storage.repo.changes import NOTIFY_CHANNEL

if TYPE_CHECKING:
    from lbauth import otel

log = logging.getLogger("lbauth.server")

KEY_RELOAD_SECONDS = 5
CHECKLIST_POLL_SECONDS = 2  # the fallback; PostgreSQL deployments hear revocations at once (NOTIFY)
WEBHOOK_FLUSH_MS = 250
MAIL_FLUSH_MS = 200
CHECKPOINT_SECONDS = 1  # SQLite: the WAL is copied back off the event loop (storage/db/sqlite.py)
DRAIN_SECONDS = 5
SWEEP_SECONDS = 600  # removed this often: expired metadata-document clients no user approved, expired mail
# links, mail settled over 30 days ago, and audit events past LBAUTH_AUDIT_RETENTION_DAYS
BODY_TIMEOUT_SECONDS = 30  # a request's body must have arrived this long after its headers


async def open_storage(settings: Settings) -> Database:
    """The database, with its schema current: SQLite migrates itself, PostgreSQL must have been
    upgraded with `lbauth db upgrade` (raises migrate.SchemaOutOfDate otherwise)."""
    db = open_database(settings.database_url)
    try:
        if settings.is_sqlite:
            await migrate.upgrade(db, settings.signing_alg)
        else:
            await migrate.check(db)
    except BaseException:
        await db.close()
        raise
    return db


async def build_services(settings: Settings, clock: Clock | None = None, *, announce: bool = True) -> Services:
    """Storage, keys and check-list for one process. `announce`: say at start what the operator
    must know (the workers of `lbauth serve` leave it to their parent, so it is said once)."""
    clock = clock or SystemClock()
    db = await open_storage(settings)
    try:
        master_keys = await master_keys_for(db, settings)  # refuses to start without every sealing key
        await ensure_keys(db, clock, master_keys, settings.signing_alg)
        keyring = await load_keyring(db, master_keys)
    except BaseException:
        await db.close()
        raise
    if announce:
        announce_signing_key(settings, keyring)
    services = Services(settings=settings, clock=clock, db=db, master_keys=master_keys, keyring=keyring)
    await services.poll_revocations()
    return services


def announce_signing_key(settings: Settings, keyring: KeyRing) -> None:
    """Contract 8: LBAUTH_SIGNING_ALG only chooses the algorithm of a new key. When it differs from
    the active key's, say so at start, with the tool that rotates to it, rather than sign with the
    old algorithm without a word."""
    signer = keyring.signer
    if signer is None or signer.alg == settings.signing_alg:
        return
    logs.event(log, f"LBAUTH_SIGNING_ALG is {settings.signing_alg}, but the active signing key {signer.kid} is "
               f"{signer.alg}: access tokens are signed with {signer.alg} until you rotate to "
               f"{settings.signing_alg} with tools/rotate_signing_key.py (stage --alg {settings.signing_alg}, then "
               "promote once the grace period has passed; docs/key-rotation.md)", level=logging.WARNING,
               activeAlg=signer.alg, signingAlg=settings.signing_alg, kid=signer.kid)


@dataclass
class RunningServer:
    services: Services
    http_server: tornado.httpserver.HTTPServer
    port: int
    deliverer: Deliverer
    reload_keys: Callable[[], Awaitable[None]]
    listener: Listener | None = None
    periodic: list[PeriodicCallback] = field(default_factory=list)
    mailer: Mailer | None = None  # None: no SMTP server, in production

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
        if self.mailer is not None:
            try:
                await asyncio.wait_for(self.mailer.drain(), DRAIN_SECONDS)
            except TimeoutError:
                log.warning("stopping with mail being sent; it is sent again when its lease ends")
            self.mailer.close()
        self.services.document_fetcher.close()
        await self.http_server.close_all_connections()
        await self.services.db.close()


class BodyDeadline(httputil.HTTPServerConnectionDelegate):
    """Tornado's `body_timeout` for `app`: a connection whose request body has not arrived within
    BODY_TIMEOUT_SECONDS of its headers is closed. One timer per request, where Tornado's own wraps
    each body read in a task, a future and a timer (10 % of a token request's CPU)."""

    def __init__(self, app: tornado.web.Application) -> None:
        self.app = app

    def start_request(self, server_conn: object, request_conn: httputil.HTTPConnection) -> httputil.HTTPMessageDelegate:
        return _BodyTimer(self.app.start_request(server_conn, request_conn), request_conn)

    def on_close(self, server_conn: object) -> None:
        self.app.on_close(server_conn)


class TracedRequests(BodyDeadline):
    """BodyDeadline, with each request in its SERVER span (tracing on, lbauth/otel.py): started when
    its headers arrive, current in whatever the request runs, ended by the access log (app.py)."""

    def __init__(self, app: tornado.web.Application, tracing: otel.Tracing) -> None:
        super().__init__(app)
        self.tracing = tracing

    def start_request(self, server_conn: object, request_conn: httputil.HTTPConnection) -> httputil.HTTPMessageDelegate:
        return _TracedRequest(super().start_request(server_conn, request_conn), request_conn, self.tracing)


class _TracedRequest(httputil.HTTPMessageDelegate):
    """Each call into the request's delegate runs in the request's trace context: the handler's task,
    started there, keeps it."""

    __slots__ = ("delegate", "connection", "tracing", "context")

    def __init__(self, delegate: httputil.HTTPMessageDelegate, connection: httputil.HTTPConnection,
                 tracing: otel.Tracing) -> None:
        self.delegate, self.connection, self.tracing = delegate, connection, tracing
        self.context: Any = None  # the request's trace context, from its headers on

    def headers_received(self, start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
                         headers: httputil.HTTPHeaders) -> Awaitable[None] | None:
        method = start_line.method if isinstance(start_line, httputil.RequestStartLine) else "GET"
        self.context = self.tracing.request_started(self.connection, method, headers)
        return self._within(self.delegate.headers_received, start_line, headers)

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        return self._within(self.delegate.data_received, chunk)

    def finish(self) -> None:
        self._within(self.delegate.finish)

    def on_connection_close(self) -> None:
        self._within(self.delegate.on_connection_close)
        self.tracing.request_abandoned(self.connection)

    def _within(self, call: Callable, *args: object) -> Any:
        if self.context is None:  # no headers yet
            return call(*args)
        token = self.tracing.enter(self.context)
        try:
            return call(*args)
        finally:
            self.tracing.leave(token)


class _BodyTimer(httputil.HTTPMessageDelegate):
    __slots__ = ("delegate", "connection", "timer")

    def __init__(self, delegate: httputil.HTTPMessageDelegate, connection: httputil.HTTPConnection) -> None:
        self.delegate, self.connection = delegate, connection
        self.timer: asyncio.TimerHandle | None = None

    def headers_received(self, start_line: httputil.RequestStartLine | httputil.ResponseStartLine,
                         headers: httputil.HTTPHeaders) -> Awaitable[None] | None:
        if "Content-Length" in headers or "Transfer-Encoding" in headers:  # a body follows
            self.timer = asyncio.get_running_loop().call_later(BODY_TIMEOUT_SECONDS, self._expired)
        setattr(self.connection, REQUEST_READ, False)
        return self.delegate.headers_received(start_line, headers)

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        return self.delegate.data_received(chunk)

    def finish(self) -> None:  # the body has been read
        self._cancel()
        setattr(self.connection, REQUEST_READ, True)
        self.delegate.finish()

    def on_connection_close(self) -> None:
        self._cancel()
        self.delegate.on_connection_close()

    def _cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _expired(self) -> None:
        self.timer = None
        gen_log.info("Timeout reading body from %s", getattr(self.connection, "context", None))
        stream = getattr(self.connection, "stream", None)
        if stream is not None:
            stream.close()  # the read fails, and the handler hears that the connection closed


async def start(settings: Settings, *, clock: Clock | None = None,
                sockets: list[socket.socket] | None = None, announce: bool = True) -> RunningServer:
    services = await build_services(settings, clock, announce=announce)
    app = make_app(services)
    requests = BodyDeadline(app) if tracing.active is None else TracedRequests(app, tracing.active)
    server = tornado.httpserver.HTTPServer(requests, max_body_size=settings.max_body_bytes,
                                           idle_connection_timeout=60)
    if sockets is None:
        try:
            sockets = tornado.netutil.bind_sockets(settings.port, settings.host, reuse_port=settings.workers > 1)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            raise OSError(exc.errno, f"{settings.host}:{settings.port} is already in use (another lbauth?); choose "
                                     "another port with LBAUTH_PORT or --port") from exc
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
    if settings.mail_enabled:
        running.mailer = Mailer(services, services.mail_composers)
        running.periodic.append(PeriodicCallback(_guarded(running.mailer.run_once), MAIL_FLUSH_MS))
    elif announce:
        logs.event(log, "mail is off: no SMTP server is configured, so sign-up and password reset are off "
                   "(set LBAUTH_SMTP_URL to turn them on)", level=logging.WARNING)
    running.periodic.append(PeriodicCallback(_guarded(services.client_documents.remove_unapproved),
                                             SWEEP_SECONDS * 1000))
    running.periodic.append(PeriodicCallback(_guarded(services.recovery.forget_expired_links),
                                             SWEEP_SECONDS * 1000))
    running.periodic.append(PeriodicCallback(_guarded(services.forget_old_mail), SWEEP_SECONDS * 1000))
    running.periodic.append(PeriodicCallback(_guarded(services.oauth.forget_ended_requests), SWEEP_SECONDS * 1000))
    running.periodic.append(PeriodicCallback(_guarded(services.audit.forget_old), SWEEP_SECONDS * 1000))
    if settings.is_sqlite:
        running.periodic.append(PeriodicCallback(_guarded(services.db.checkpoint), CHECKPOINT_SECONDS * 1000))
    else:
        running.listener = Listener(settings.database_url, NOTIFY_CHANNEL,
                                    _guarded(services.poll_revocations))
        running.listener.start()
    for callback in running.periodic:
        callback.start()
    if not settings.development and passwords.below_owasp_minimum(settings.argon2):
        log.warning("LBAUTH_ARGON2 is below OWASP's minimum for argon2id (19 MiB with 2 passes, or the "
                    "equivalent): stolen password hashes would be cheap to guess")
    if announce and _is_ip_literal(settings.webauthn_rp_id):
        logs.event(log, f"passkeys are off at this address: browsers refuse an IP address ({settings.webauthn_rp_id}) "
                   "as their domain; open lbauth at a host name (in development, LBAUTH_BASE_URL=http://localhost:"
                   f"{port})", level=logging.WARNING)
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
                asyncio.run(serve_forever(settings, announce=False))
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


async def serve_forever(settings: Settings, *, announce: bool = True) -> None:
    """Run until SIGINT or SIGTERM, then stop accepting, finish, and close. With LBAUTH_OTEL=on,
    tracing starts here, in the process that serves (each worker, after the fork), and what it
    holds is exported at the end."""
    if settings.otel:
        tracing.start()
    try:
        running = await start(settings, announce=announce)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopping.set)
        await stopping.wait()
        logs.event(log, "stopping")
        await running.stop()
    finally:
        tracing.stop()


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True

"""Test rig: every storage test runs twice, on SQLite and on PostgreSQL, against the real server.

- `backend` is parametrized ("sqlite", "postgresql"), so the report names both.
- `database_url` gives each test a fresh database: a new SQLite file, or a new PostgreSQL
  database cloned from a template migrated once per run (CREATE DATABASE ... TEMPLATE).
- `server` starts lbauth in-process on a loopback port with a frozen clock; tests talk real HTTP.

PostgreSQL comes from LBAUTH_TEST_POSTGRES_URL (default: postgres@127.0.0.1:5432/test). When it
is unreachable its half of the suite is skipped with the reason, except under CI=true, where the
run fails.

Why pytest-asyncio and not pytest-tornasync: see README, "Testing".
"""

from __future__ import annotations

import asyncio
import fcntl
import io
import json
import logging
import os
import re
import secrets
import shutil
import subprocess
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import tornado.netutil
from sqlalchemy.engine import make_url

from lbauth import logs
from lbauth import settings as settings_mod
from lbauth.clock import FrozenClock
from lbauth.core.crypto.keys import ID_TOKEN_DEFAULT_ALG, ensure_active_key
from lbauth.core.crypto.masterkey import MasterKeys, generate_key_text
from lbauth.handlers.operator_json import created_app_json
from lbauth.mailer import DEVELOPMENT_LINK
from lbauth.server import RunningServer, build_services, start
from lbauth.services import Services
from lbauth.storage import migrate
from lbauth.storage.db import Database, open_database
from lbauth.storage.models import Base
from tests.client import ERROR_BODIES, Client
from tests.forked import ZYGOTE
from tests.receiver import Receiver

ROOT = Path(__file__).resolve().parent.parent
PG_URL = os.environ.get("LBAUTH_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test")
IN_CI = os.environ.get("CI", "").lower() in ("true", "1", "yes")
BACKENDS = ("sqlite", "postgresql")
START_TIME = 1_900_000_000  # the frozen clock's start: 2030-03-17
# The tests' argon2id cost: the least there is. The default (RFC 9106: t=3, 64 MiB, p=4) costs
# 150 ms of CPU a hash, and two thirds of the suite's CPU went there. tests/test_login.py checks
# the default cost itself.
TEST_ARGON2 = "t=1,m=8,p=1"
_EMPTIED = tuple(reversed(Base.metadata.sorted_tables))  # children first
# Every test database starts with the ID tokens' RS256 key, sealed under this master key, which
# every test's data dir holds (`give_master_key`), as a deployment that has run before would:
# making a 2048-bit RSA key at each server start was a third of a short test's CPU. The
# access-token key is still made at start, of the algorithm the test's settings ask for.
TEMPLATE_MASTER_KEY = generate_key_text()


async def _seed_id_token_key(db: Database) -> None:
    master_keys = MasterKeys.parse(TEMPLATE_MASTER_KEY, "the tests' master key")
    await ensure_active_key(db, FrozenClock(START_TIME), master_keys, ID_TOKEN_DEFAULT_ALG)


def give_master_key(data_dir: Path) -> None:
    """The data dir of a test database's server: it holds the key the database's seeded key is
    sealed under (0700 and 0600, as lbauth makes them)."""
    data_dir.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(data_dir / "master.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(TEMPLATE_MASTER_KEY + "\n")


def _pg_dsn(url: str, database: str | None = None) -> str:
    parsed = make_url(url)
    if database:
        parsed = parsed.set(database=database)
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)


def _pg_url(database: str) -> str:
    return make_url(PG_URL).set(database=database).render_as_string(hide_password=False)


async def _pg_admin(statements: list[str]) -> None:
    conn = await asyncpg.connect(_pg_dsn(PG_URL), timeout=5)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


def _run_apart(coroutine: Coroutine[Any, Any, Any]) -> Any:
    """Run a coroutine to completion on its own loop in a thread (a test's loop may be running)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


# What a database's schema is: compared when a test hands its database back.
_SCHEMA_PRINT = """
    SELECT md5(coalesce((SELECT string_agg(table_name || '.' || column_name || ':' || data_type || ':'
                                           || coalesce(column_default, ''), ',' ORDER BY table_name, column_name)
                         FROM information_schema.columns WHERE table_schema = 'public'), '')
               || coalesce((SELECT string_agg(indexdef, ',' ORDER BY indexdef) FROM pg_indexes
                            WHERE schemaname = 'public'), '')
               || coalesce((SELECT string_agg(version_num, ',') FROM alembic_version), ''))"""


class PostgresTemplate:
    """A database migrated once per worker; the tests' databases are copies of it, reused: a test's
    database is emptied when it hands it back (CREATE and DROP DATABASE cost about 1.5 s a test on
    this machine, emptying a few milliseconds)."""

    def __init__(self) -> None:
        self.name = f"lbauth_tpl_{os.getpid()}"
        self.error: str | None = None
        self.ready = False
        self.schema = ""
        self.free: list[str] = []  # copies handed back, emptied
        self.copies: set[str] = set()
        self.keys: list[asyncpg.Record] = []  # the seeded signing keys, put back after each test

    def prepare(self) -> None:
        async def work() -> None:
            await _pg_admin([f'DROP DATABASE IF EXISTS "{self.name}"', f'CREATE DATABASE "{self.name}"'])
            db = open_database(_pg_url(self.name))
            try:
                await migrate.upgrade(db)
                await _seed_id_token_key(db)
            finally:
                await db.close()
            conn = await asyncpg.connect(_pg_dsn(PG_URL, self.name), timeout=5)
            try:
                self.schema = await conn.fetchval(_SCHEMA_PRINT)
                self.keys = await conn.fetch("SELECT * FROM signing_keys")
            finally:
                await conn.close()
        try:
            _run_apart(work())
            self.ready = True
        except (OSError, asyncpg.PostgresError, TimeoutError) as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    async def take(self) -> str:
        """An empty, migrated database for one test."""
        if self.free:
            return self.free.pop()
        name = f"lbauth_t_{secrets.token_hex(6)}"
        await _pg_admin([f'CREATE DATABASE "{name}" TEMPLATE "{self.name}"'])
        self.copies.add(name)
        return name

    async def give_back(self, name: str) -> None:
        """Empty the database for the next test, or drop it if the test changed more than rows."""
        try:
            await _pg_admin([f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}' "
                             "AND pid <> pg_backend_pid()"])
            conn = await asyncpg.connect(_pg_dsn(PG_URL, name), timeout=5)
            try:
                if await conn.fetchval(_SCHEMA_PRINT) != self.schema:
                    raise ValueError("the test changed the schema")
                sequences = [row[0] for row in await conn.fetch("SELECT sequencename FROM pg_sequences")]
                async with conn.transaction():
                    await conn.execute("".join(f'DELETE FROM "{table.name}"; ' for table in _EMPTIED)
                                       + "".join(f'ALTER SEQUENCE "{seq}" RESTART; ' for seq in sequences))
                    await conn.copy_records_to_table("signing_keys", records=self.keys,
                                                     columns=list(self.keys[0].keys()))
            finally:
                await conn.close()
        except (OSError, ValueError, asyncpg.PostgresError, TimeoutError):
            self.copies.discard(name)
            await _pg_admin([f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'])
            return
        self.free.append(name)

    def drop(self) -> None:
        if self.ready:
            _run_apart(_pg_admin([f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'
                                  for name in (*self.copies, self.name)]))


@pytest.fixture(scope="session")
def pg_template() -> PostgresTemplate:
    template = PostgresTemplate()
    template.prepare()
    yield template
    template.drop()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file; each test's database is a copy of it."""
    path = tmp_path_factory.mktemp("template") / "lbauth.db"

    async def work() -> None:
        db = open_database(f"sqlite+aiosqlite:///{path}")
        try:
            await migrate.upgrade(db)
            await _seed_id_token_key(db)
        finally:
            await db.close()
    _run_apart(work())
    return path


def require_postgres(template: PostgresTemplate) -> None:
    if template.ready:
        return
    reason = (f"PostgreSQL is not reachable at {make_url(PG_URL).render_as_string(hide_password=True)} "
              f"({template.error}); set LBAUTH_TEST_POSTGRES_URL to run the PostgreSQL half")
    if IN_CI:
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(autouse=True)
def alone_when_marked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Tests marked `alone` check that an outage is answered within about a second: they run while
    no other test runs, in this process or any other of the run (pytest-xdist's workers share the
    run's temporary directory). Every test holds a shared lock, an `alone` one an exclusive lock;
    a gate, held by an `alone` test while it waits, stops new tests from starting meanwhile."""
    exclusive = request.node.get_closest_marker("alone") is not None
    locks = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's directory is in the run's
        locks = locks.parent
    with open(locks / "lbauth-gate.lock", "a") as gate, open(locks / "lbauth-tests.lock", "a") as tests:
        fcntl.flock(gate, fcntl.LOCK_EX)
        if exclusive:
            fcntl.flock(tests, fcntl.LOCK_EX)
            fcntl.flock(gate, fcntl.LOCK_UN)
        else:
            fcntl.flock(gate, fcntl.LOCK_UN)
            fcntl.flock(tests, fcntl.LOCK_SH)
        yield  # both locks end with their files


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
async def database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh, migrated database for this test, with its ID-token key; the master key that opens
    it is in the test's data dir (tmp_path / "data")."""
    give_master_key(tmp_path / "data")
    if backend == "sqlite":
        path = tmp_path / "lbauth.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    template = request.getfixturevalue("pg_template")
    require_postgres(template)
    name = await template.take()
    try:
        yield _pg_url(name)
    finally:
        await template.give_back(name)


@pytest.fixture
async def empty_database_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A database with no schema at all (for migration tests)."""
    if backend == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"
        return
    require_postgres(request.getfixturevalue("pg_template"))
    name = f"lbauth_e_{secrets.token_hex(6)}"
    await _pg_admin([f'CREATE DATABASE "{name}"'])
    try:
        yield _pg_url(name)
    finally:
        await _pg_admin([f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'])


def make_settings(tmp_path: Path, database_url: str, port: int = 0, **overrides: object) -> settings_mod.Settings:
    """Settings as an operator would give them, through the real loader (no environment)."""
    flags = {"data_dir": str(tmp_path / "data"), "database_url": database_url, "port": port,
             "rate_limits": "off", "argon2": TEST_ARGON2, **{k: v for k, v in overrides.items() if k != "environ"}}
    return settings_mod.load(flags, environ=overrides.get("environ", {}))  # type: ignore[arg-type]


class TestServer:
    """A running lbauth process-in-a-test: its URL, clock, services and an HTTP client."""

    __test__ = False

    def __init__(self, running: RunningServer, clock: FrozenClock) -> None:
        self.running = running
        self.clock = clock
        self.services = running.services
        self.settings = running.services.settings
        self.url = f"http://127.0.0.1:{running.port}"
        self.client = Client(self.url)

    @property
    def db(self) -> Database:
        return self.services.db

    async def quiet(self) -> None:
        """Stop the periodic jobs (key reload, revocation poll, webhook flush) and the NOTIFY
        listener, so that a test counting SQL statements counts only its own requests'.

        With no revocation poll, this process would fail closed 5 s later (contract section 7),
        answering 503 on the access-token endpoints. Its check-list is told not to go stale: these
        tests count statements and do not test freshness, and no server outside the tests does
        this (tests/test_freshness.py tests the production behaviour)."""
        self.services.checklist.max_age = None
        for callback in self.running.periodic:
            callback.stop()
        if self.running.listener:
            await self.running.listener.stop()
            self.running.listener = None

    async def create_user(self, email: str | None = None, password: str = "correct horse battery",
                          name: str = "Test User", **extra: object) -> dict:
        from lbauth.core.accounts import users
        from lbauth.handlers.account_json import created_user_json
        email = email or f"user-{secrets.token_hex(4)}@example.com"
        created = await users.create_user(self.db, self.clock, email=email, name=name, password=password,
                                          cost=self.settings.argon2, **extra)  # type: ignore[arg-type]
        return {**created_user_json(created), "password": password}

    async def login(self, email: str, password: str) -> str:
        response = await self.client.post("/api/auth/login", json={"email": email, "password": password})
        assert response.status == 200, response.body
        return response.data["token"]

    async def create_app(self, owner_email: str, **options: object) -> dict:
        options.setdefault("name", "Test App")
        options.setdefault("redirect_uris", ["https://app.example/callback"])
        created = await self.services.apps.create(owner_email=owner_email, **options)  # type: ignore[arg-type]
        return created_app_json(created)  # as `lbauth apps create --json` prints it


async def start_server(tmp_path: Path, database_url: str, clock: FrozenClock | None = None, *,
                       localhost: bool = False, **overrides: object) -> TestServer:
    """`localhost`: the public address is http://localhost:PORT, which Chromium accepts as a
    WebAuthn relying party (it refuses 127.0.0.1); the server still listens on 127.0.0.1."""
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    port = sockets[0].getsockname()[1]
    if localhost:
        overrides["base_url"] = f"http://localhost:{port}"
    settings = make_settings(tmp_path, database_url, port, **overrides)
    clock = clock or FrozenClock(START_TIME)
    running = await start(settings, clock=clock, sockets=sockets)
    server = TestServer(running, clock)
    if localhost:
        server.url = settings.base_url  # what a browser opens; server.client keeps 127.0.0.1
    return server


@pytest.fixture
async def server(tmp_path: Path, database_url: str) -> AsyncIterator[TestServer]:
    async with running_server(tmp_path, database_url) as srv:
        yield srv


@asynccontextmanager
async def running_server(tmp_path: Path, database_url: str, **overrides: object) -> AsyncIterator[TestServer]:
    """`start_server`, stopped at the end of the block."""
    srv = await start_server(tmp_path, database_url, **overrides)
    try:
        yield srv
    finally:
        srv.client.close()
        await srv.running.stop()


@pytest.fixture
async def dev_server(tmp_path: Path, database_url: str) -> AsyncIterator[TestServer]:
    """lbauth in development (LBAUTH_ENV=development), with a 2-second webhook timeout."""
    async with running_server(tmp_path, database_url, env="development", webhook_timeout=2) as srv:
        yield srv


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless Chromium (Debian's, through Playwright) for this test, on this test's event loop:
    Playwright's objects belong to the loop they were started on."""
    from tests.support import CHROMIUM, CHROMIUM_ARGS, async_playwright, require_browser
    require_browser()
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
async def mailbox() -> AsyncIterator[Any]:
    """A real SMTP server on a loopback port (tests/mailbox.py), stopped at the end of the test."""
    from tests.mailbox import Mailbox
    box = await Mailbox.start()
    try:
        yield box
    finally:
        await box.stop()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A webhook receiver on a loopback port (tests/receiver.py), stopped after the test."""
    r = Receiver()
    yield r
    await r.stop()


# ---- the core and the storage without HTTP ----------------------------------------------------------------

@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """This test's fresh database, opened."""
    database = open_database(database_url)
    try:
        yield database
    finally:
        await database.close()


@asynccontextmanager
async def started_services(tmp_path: Path, database_url: str, **overrides: object) -> AsyncIterator[Services]:
    """One process's services (storage, signing keys, check-list, token minters) with the frozen
    clock, as `lbauth serve` builds them, without HTTP."""
    services = await build_services(make_settings(tmp_path, database_url, **overrides), FrozenClock(START_TIME),
                                    announce=False)
    try:
        yield services
    finally:
        await services.db.close()


@pytest.fixture
async def services(tmp_path: Path, database_url: str) -> AsyncIterator[Services]:
    async with started_services(tmp_path, database_url) as built:
        yield built


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60,
            input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real `lbauth` command in a child process, forked from one that has imported lbauth
    already (tests/forked.py): the process's own argv, environment, stdio and exit status."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
    full_env["LBAUTH_ARGON2"] = TEST_ARGON2
    full_env.update(env or {})
    return ZYGOTE.run(list(args), env=full_env, timeout=timeout, input=input)


@pytest.fixture
def cli(tmp_path: Path, database_url: str) -> Any:
    """`lbauth` on this test's database: `cli(*args, ok=True)` runs it (asserting exit status 0
    unless `ok=False`) and returns the finished process; `cli.json(*args)` adds `--json` and
    returns the parsed output."""
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        result = run_cli(*args, env=env)
        if ok:
            assert result.returncode == 0, result.stderr
        return result

    def run_json(*args: str) -> Any:
        return json.loads(run(*args, "--json").stdout)

    run.json = run_json  # type: ignore[attr-defined]
    return run


async def arun_cli(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`run_cli` in a thread: an in-process test server keeps serving meanwhile, as a real one does.
    A CLI run blocking the event loop for a second stalled the server's database connects into
    timeouts (a 503 that paused webhook claims) in a way no real deployment sees."""
    return await asyncio.to_thread(run_cli, *args, **kwargs)


# ---- secrets never leak (issue 8): every log line and error body of the whole run ----------------------

# An lbauth credential in clear: the redaction filter would have written `lba_xx_[redacted]`.
_CLEAR_CREDENTIAL = re.compile(
    r"lba_(?:ac|at|rt|ut|cs|whs|iat|rat|su|ev|ec|pr|mt|pk|dc)_(?!\[redacted\])[A-Za-z0-9_\-]{6,}")


def _shown_on_purpose(line: str) -> str:
    """The line as the check reads it: the one line allowed a link token, the mailer's in development
    without SMTP (lbauth.mailer.DEVELOPMENT_LINK: a person trying lbauth follows it), is read
    without its `link` field, so anything else it held would still be found."""
    if '"logger": "lbauth.mail"' not in line or DEVELOPMENT_LINK not in line:
        return line
    entry = json.loads(line)
    if entry.get("msg") != DEVELOPMENT_LINK:
        return line
    entry.pop("link", None)
    return json.dumps(entry)
_TEST_PASSWORDS = ("correct horse battery",)  # TestServer.create_user's default


@pytest.fixture(scope="session", autouse=True)
def no_secret_in_any_log_line_or_error_body():
    """Formats every log record of the run through lbauth's own pipeline (redaction filter, JSON
    lines), keeps every error body the tests received, and at the end finds no credential or
    password in either."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(logs.RedactingFilter())
    handler.setFormatter(logs.JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO))
    yield
    root.removeHandler(handler)
    root.setLevel(level)
    lines = stream.getvalue().splitlines()
    lines = [_shown_on_purpose(line) for line in lines]
    leaks = [line for line in lines if _CLEAR_CREDENTIAL.search(line) or any(p in line for p in _TEST_PASSWORDS)]
    leaks += [body.decode("utf-8", "replace") for body in ERROR_BODIES
              if _CLEAR_CREDENTIAL.search(body.decode("utf-8", "replace"))
              or any(p.encode() in body for p in _TEST_PASSWORDS)]
    assert not leaks, f"{len(leaks)} log lines or error bodies hold a secret, first: {leaks[0][:300]}"


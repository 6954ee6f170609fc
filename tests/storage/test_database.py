"""The Database protocol on both backends (lbauth.storage.db): units of work commit when they
return, roll back when they raise, commit and then raise on CommitThenRaise; read, ping,
checkpoint, close and the statement count. No HTTP."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest
from sqlalchemy import Connection, func, insert, select, update
from sqlalchemy.engine import make_url

from lbauth.errors import ServerUnavailable
from lbauth.storage.db import CommitThenRaise, Database, open_database
from lbauth.storage.db import sqlite as sqlite_module
from lbauth.storage.models import users


class Refused(Exception):
    pass


def add_user(conn: Connection, user_id: str) -> None:
    conn.execute(insert(users).values(id=user_id, email=f"{user_id}@example.com", name="N", password_hash="-",
                                      created_at=1))


def names(conn: Connection) -> list[str]:
    return list(conn.execute(select(users.c.id).order_by(users.c.id)).scalars())


async def test_a_unit_that_returns_is_committed(db: Database) -> None:
    def work(conn: Connection) -> str:
        add_user(conn, "usr_a")
        return "done"

    assert await db.transaction(work) == "done"
    assert await db.read(names) == ["usr_a"]


async def test_a_unit_that_raises_is_rolled_back(db: Database) -> None:
    def work(conn: Connection) -> None:
        add_user(conn, "usr_a")
        raise Refused

    with pytest.raises(Refused):
        await db.transaction(work)
    assert await db.read(names) == []


async def test_commit_then_raise_commits_and_raises_the_wrapped_error(db: Database) -> None:
    def work(conn: Connection, user_id: str, *, note: str) -> None:
        add_user(conn, user_id)
        raise CommitThenRaise(Refused(note))

    with pytest.raises(Refused, match="kept"):
        await db.transaction(work, "usr_b", note="kept")
    assert await db.read(names) == ["usr_b"]


async def test_single_statement_and_first_behave_as_a_transaction(db: Database) -> None:
    await db.transaction(add_user, "usr_c", single_statement=True)
    await db.transaction(add_user, "usr_d", first=True)
    assert await db.read(names) == ["usr_c", "usr_d"]


async def test_read_passes_arguments_and_keywords(db: Database) -> None:
    def count_like(conn: Connection, prefix: str, *, suffix: str) -> int:
        return conn.execute(select(func.count()).select_from(users)
                            .where(users.c.id.like(prefix + "%" + suffix))).scalar_one()

    await db.transaction(lambda conn: [add_user(conn, u) for u in ("usr_x1", "usr_x2", "usr_y1")])
    assert await db.read(count_like, "usr_x", suffix="2") == 1


async def test_statements_are_counted_without_transaction_control(db: Database) -> None:
    def three(conn: Connection) -> None:
        add_user(conn, "usr_s")
        conn.execute(update(users).where(users.c.id == "usr_s").values(name="M"))
        conn.execute(select(users.c.name)).all()

    before = db.statements
    await db.transaction(three)
    assert db.statements - before == 3
    before = db.statements
    await db.read(names)
    assert db.statements - before == 1


async def test_ping_checkpoint_and_close(database_url: str) -> None:
    db = open_database(database_url)
    assert await db.ping() is True
    await db.transaction(add_user, "usr_p")
    await db.checkpoint()
    assert db.up is True
    await db.close()


async def test_an_unreachable_postgresql_is_unavailable_then_down() -> None:
    db = open_database("postgresql+asyncpg://postgres@127.0.0.1:9/none")
    try:
        with pytest.raises(ServerUnavailable) as refused:
            await db.read(names)
        assert refused.value.headers["Retry-After"] == "5"
        assert db.up is False
        assert await db.ping(timeout=0.3) is False
        with pytest.raises(ServerUnavailable):  # down: refused at once, without a connection
            await db.transaction(add_user, "usr_z")
    finally:
        await db.close()


class SlowConnects:
    """A TCP relay to PostgreSQL that holds each new connection for `delay` seconds while `slow`
    is set before relaying it: a host too busy to set up a connection quickly, as when a loaded
    server opens its pool, while the connections it has answer at once."""

    def __init__(self, database_url: str, delay: float, delays: list[float] | None = None) -> None:
        self.url = make_url(database_url)
        self.delay, self.slow = delay, False
        self.delays = delays or []  # while not empty, the next connections' own delays
        self.listener: asyncio.Server | None = None
        self.links: set[asyncio.Task] = set()

    async def start(self) -> str:
        self.listener = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self.listener.sockets[0].getsockname()[1]
        return self.url.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = asyncio.current_task()
        assert link is not None
        self.links.add(link)
        link.add_done_callback(self.links.discard)
        if self.delays:
            await asyncio.sleep(self.delays.pop(0))
        elif self.slow:
            await asyncio.sleep(self.delay)
        up_reader, up_writer = await asyncio.open_connection(self.url.host or "127.0.0.1", self.url.port or 5432)
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()

    async def close(self) -> None:
        """Stop, once every link has ended: a connection set up after its client gave up included."""
        if self.listener is not None:
            self.listener.close()
        if self.links:
            await asyncio.wait(self.links, timeout=5)


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_slow_connect_while_the_database_answers_others_waits_instead_of_503(database_url: str) -> None:
    """A busy database queues, it never answers 503: a connect slower than the outage timeout
    (0.5 s), while another unit of work finishes meanwhile, is tried again, not taken for an outage."""
    relay = SlowConnects(database_url, delay=0.8)
    db = open_database(await relay.start())
    try:
        await db.transaction(add_user, "usr_a")  # one pooled connection, fast
        relay.slow = True

        def hold(conn: Connection) -> list[str]:
            conn.execute(select(func.pg_sleep(0.3)))
            return names(conn)
        holding = asyncio.ensure_future(db.read(hold))  # takes the pooled connection for 0.3 s
        await asyncio.sleep(0.05)
        assert await db.read(names) == ["usr_a"]  # needs a new connection: 0.8 s to set up
        assert await holding == ["usr_a"] and db.up
    finally:
        await db.close()
        await relay.close()


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_burst_on_a_cold_pool_with_slow_connects_waits_instead_of_503(database_url: str) -> None:
    """A burst of requests opens the pool on a loaded host: some connects take longer than the
    outage timeout (0.5 s) while no unit of work has finished yet. The database answers a fresh
    connection, so those units connect again instead of answering 503."""
    relay = SlowConnects(database_url, delay=0.0, delays=[0.8, 0.8, 0.8, 0.8, 0.1, 0.1])
    db = open_database(await relay.start())

    def hold(conn: Connection) -> int:
        conn.execute(select(func.pg_sleep(0.6)))  # no unit finishes before the slow connects give up
        return 1
    try:
        assert await asyncio.gather(*(db.read(hold) for _ in range(6))) == [1] * 6
        assert db.up
    finally:
        await db.close()
        await relay.close()


@pytest.mark.parametrize("backend", ["postgresql"])
async def test_a_process_that_never_reached_its_database_waits_for_a_slow_first_connect(database_url: str) -> None:
    """A server starting on a loaded host: every connect takes 0.8 s, longer than the outage
    timeout, before the process has ever reached PostgreSQL. It waits (up to 5 s) instead of
    refusing to start; once reached, a slow connect is an outage check again."""
    relay = SlowConnects(database_url, delay=0.8)
    relay.slow = True
    db = open_database(await relay.start())
    try:
        assert await db.read(names) == []
        assert db.up
    finally:
        await db.close()
        await relay.close()


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_sqlite_write_waits_for_another_writer(database_url: str) -> None:
    """Another process holding the write lock: the unit yields to the loop and tries again."""
    db = open_database(database_url)
    other = sqlite3.connect(database_url.split("///", 1)[1], isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        asyncio.get_running_loop().call_later(0.05, other.execute, "COMMIT")
        await db.transaction(add_user, "usr_w")
        assert await db.read(names) == ["usr_w"]
    finally:
        other.close()
        await db.close()


@pytest.mark.parametrize("backend", ["sqlite"])
async def test_a_sqlite_write_that_never_gets_its_turn_is_unavailable(database_url: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_module, "SQLITE_WRITE_WAIT", 0.2)
    db = open_database(database_url)
    other = sqlite3.connect(database_url.split("///", 1)[1], isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        with pytest.raises(ServerUnavailable):
            await db.transaction(add_user, "usr_w")
        other.execute("ROLLBACK")
        assert await db.read(names) == []
    finally:
        other.close()
        await db.close()

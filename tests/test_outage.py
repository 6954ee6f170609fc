"""PostgreSQL unreachable in the middle of traffic (issue 8, item 3; contract sections 3, 10 and 13).

A real server process under steady concurrent traffic (logins, authorize and code exchange,
refresh, /api/auth/me, revocations) loses its database, in one of three ways:
- `refused`: `ALTER DATABASE ... ALLOW_CONNECTIONS false` and every backend of it terminated, so
  each pooled connection is dead at once and every new one is refused;
- `silent`: the server reaches PostgreSQL through a TCP relay that cuts every connection it
  carries and then accepts new ones without a word, as a host that stopped answering: each connect
  attempt waits for its timeout;
- `blackhole`: the same relay, except that the connections it carries are not cut: they stay open
  and nothing crosses them either way (a partition that drops packets), so a query in flight is
  never answered and never fails on its own (issue 19: it waited for the 30 s command timeout).
Meanwhile:

- every answer is a success that needs no database, or 503 `server.unavailable` with a positive
  Retry-After and no traceback or driver name, and none takes longer than 1 s, also for a burst
  of requests that all meet the dead pool together;
- /readyz is 503 and /healthz 200;
- the webhook flusher backs off (a bounded number of claim attempts, one warning each, no
  traceback anywhere in the log) and the process lives on.

Then the database returns, with no restart: /readyz is 200 again, the same traffic succeeds,
the receiver gets every event queued before the outage and every event of an acknowledged
revocation, and no acknowledged revocation is lost.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import random
import time
from dataclasses import dataclass, field

import pytest
from sqlalchemy import func, select
from sqlalchemy.engine import make_url
from tornado.httpclient import HTTPClientError

from lbauth.clock import SystemClock
from lbauth.storage.db import open_database
from lbauth.storage.models import webhook_events
from tests.client import Client, Response
from tests.conftest import _pg_admin, start_server
from tests.flow_helpers import Setup, refresh, tokens_for
from tests.processes import ServerProcess
from tests.receiver import Answer, Receiver
from tests.support import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.alone]

GUARD = 1.0  # no answer during the outage may take longer (a hang guard, not a benchmark)
CALM_GUARD = 10.0  # outside the outage: only a hang guard
OUTAGE_SECONDS = 6.0
USERS, REVOKED_APPS, BUSY_APPS = 4, 10, 2
QUEUED_BEFORE = 6  # revocations whose events are pending (receiver answers 503) when the cut comes
LEAKS = ("Traceback", "asyncpg", "sqlalchemy", "psycopg", "postgres", 'File "')


@dataclass
class Outcome:
    kind: str
    phase: str
    started: float
    elapsed: float
    response: Response | None = None
    error: str | None = None


@dataclass
class Traffic:
    server: ServerProcess
    busy: list[dict]  # per (user, app): setup, tokens
    to_revoke: list[dict]
    phase: str = "before"
    stop: bool = False
    outcomes: list[Outcome] = field(default_factory=list)
    revoked: list[dict] = field(default_factory=list)  # acknowledged with 200
    clients: list[Client] = field(default_factory=list)

    def client(self) -> Client:
        c = Client(self.server.url)
        self.clients.append(c)
        return c

    async def call(self, kind: str, request) -> Outcome:
        """One request, timed; during the outage it gets GUARD seconds, no more."""
        phase, started = self.phase, time.monotonic()
        timeout = GUARD if phase == "outage" else CALM_GUARD
        try:
            response = await request(timeout)
        except (OSError, HTTPClientError, TimeoutError) as exc:
            outcome = Outcome(kind, phase, started, time.monotonic() - started, error=f"{type(exc).__name__}: {exc}")
        else:
            outcome = Outcome(kind, phase, started, time.monotonic() - started, response)
        self.outcomes.append(outcome)
        return outcome

    async def worker(self, kind: str, pause: float) -> None:
        client = self.client()
        rng = random.Random(kind)
        while not self.stop:
            pair = rng.choice(self.busy)
            setup: Setup = pair["setup"]
            if kind == "me":
                token = pair["tokens"]["accessToken"]
                await self.call(kind, lambda t, token=token: client.get("/api/auth/me", bearer=token, timeout=t))
            elif kind == "refresh":
                form = {"grant_type": "refresh_token", "refresh_token": pair["tokens"]["refreshToken"],
                        "client_id": setup.client_id, "client_secret": setup.client_secret}
                await self.call(kind, lambda t, form=form: client.post("/api/oauth/token/refresh", timeout=t,
                                                                       form=form))
            elif kind == "login":
                login = {"email": setup.user["email"], "password": setup.user["password"]}
                await self.call(kind, lambda t, login=login: client.post("/api/auth/login", timeout=t, json=login))
            elif kind == "flow":
                asked = {"clientId": setup.client_id, "redirectUri": setup.redirect_uri, "scope": ["userinfo"]}
                got = await self.call("authorize", lambda t, s=setup, asked=asked: client.post(
                    "/api/oauth/authorize/external", bearer=s.token, timeout=t, json=asked))
                if got.response is not None and got.response.status == 200:
                    form = {"grant_type": "authorization_code", "code": got.response.json["data"]["code"],
                            "redirect_uri": setup.redirect_uri, "client_id": setup.client_id,
                            "client_secret": setup.client_secret}
                    await self.call("exchange", lambda t, form=form: client.post("/api/oauth/token/code", timeout=t,
                                                                                 form=form))
            await asyncio.sleep(pause)

    async def revoker(self, pause: float) -> None:
        """Revokes one grant after another; those acknowledged with 200 are remembered."""
        client = self.client()
        while not self.stop and self.to_revoke:
            pair = self.to_revoke.pop(0)
            got = await self.call("revoke", lambda t, pair=pair: client.delete(
                f"/api/auth/authorizations/{pair['setup'].client_id}", bearer=pair["setup"].token, timeout=t))
            if got.response is not None and got.response.status == 200:
                self.revoked.append({**pair, "eventId": got.response.json["data"]["eventId"]})
            await asyncio.sleep(pause)

    def close(self) -> None:
        for c in self.clients:
            c.close()


def check_answer(outcome: Outcome) -> str | None:
    """What is wrong with one answer, or None: a success, or a proper 503."""
    if outcome.response is None:
        return f"{outcome.kind} ({outcome.phase}): no answer after {outcome.elapsed:.2f} s: {outcome.error}"
    r = outcome.response
    if r.status == 200:
        return None
    if r.status != 503:
        return f"{outcome.kind} ({outcome.phase}): {r.status} {r.text[:200]}"
    try:
        r.assert_error(503, "server.unavailable")
        assert int(r.headers.get("Retry-After", "0")) > 0, r.headers.get("Retry-After")
        assert not any(leak.lower() in r.text.lower() for leak in LEAKS), r.text
    except (AssertionError, ValueError) as exc:
        return f"{outcome.kind} ({outcome.phase}): improper 503: {exc!r} {r.text[:200]}"
    return None


def server_log(server: ServerProcess) -> list[dict]:
    lines = []
    for line in server.log.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            lines.append({"level": "raw", "msg": line})
    return lines


class Refused:
    """PostgreSQL refuses connections to the database, and every backend of it is terminated."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url  # the server connects directly
        self.name = make_url(database_url).database

    async def cut(self) -> None:
        await _pg_admin([f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS false',
                         f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{self.name}'"])

    async def restore(self) -> None:
        await _pg_admin([f'ALTER DATABASE "{self.name}" ALLOW_CONNECTIONS true'])

    async def close(self) -> None:
        pass


class Silent:
    """A TCP relay between the server and PostgreSQL that can go silent, as a host that stopped
    answering: the connections it carried are cut, and new ones are accepted but never answered,
    so a connect attempt waits for its own timeout."""

    def __init__(self, database_url: str) -> None:
        target = make_url(database_url)
        self.target = (target.host or "127.0.0.1", target.port or 5432)
        self.silent = False
        self.flowing = asyncio.Event()  # cleared: what the relay reads, it holds (Blackhole)
        self.flowing.set()
        self.links: set[asyncio.StreamWriter] = set()
        self.held: list[asyncio.StreamWriter] = []
        self.listener: asyncio.Server | None = None
        self._database_url = database_url

    async def start(self) -> Silent:
        self.listener = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self.listener.sockets[0].getsockname()[1]
        self.database_url = make_url(self._database_url).set(host="127.0.0.1", port=port) \
            .render_as_string(hide_password=False)
        return self

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.silent:
            self.held.append(writer)  # open, and never a word
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self.links |= {writer, up_writer}
        await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        self.links -= {writer, up_writer}

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self.flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            writer.transport.abort()

    async def cut(self) -> None:
        self.silent = True
        for writer in list(self.links):
            writer.transport.abort()

    async def restore(self) -> None:
        self.silent = False
        self.flowing.set()
        for writer in self.held:
            writer.transport.abort()
        self.held.clear()

    async def close(self) -> None:
        await self.cut()
        await self.restore()
        self.listener.close()


class Blackhole(Silent):
    """The relay as a network partition that drops packets: the connections it carries stay open,
    but nothing crosses them in either direction, so a query in flight is neither answered nor
    failed (no reset, no error); new connections are accepted and never answered. When it heals,
    what was sent meanwhile goes through, as TCP would retransmit it."""

    async def cut(self) -> None:
        self.silent = True
        self.flowing.clear()

    async def close(self) -> None:
        await Silent.cut(self)  # now cut them, so that nothing outlives the test
        await self.restore()
        self.listener.close()


async def seed(tmp_path, database_url: str, receiver: Receiver, base_url: str) -> list[list[dict]]:
    """Users, apps with the receiver as webhook URL, and a grant with tokens per (user, app), made
    in-process before the server under test starts (one deployment: the same base URL, so the
    same issuer and audience). Returns the pairs by user."""
    seeder = await start_server(tmp_path, database_url, env="development", clock=SystemClock(), base_url=base_url)
    try:
        await seeder.quiet()
        owner = await seeder.create_user()
        apps = [await seeder.create_app(owner["email"], name=f"App {i}", webhook_url=receiver.url)
                for i in range(REVOKED_APPS + BUSY_APPS)]
        by_user = []
        for _ in range(USERS):
            user = await seeder.create_user()
            token = await seeder.login(user["email"], user["password"])
            pairs = []
            for app in apps:
                setup = Setup(user=user, token=token, app=app)
                pairs.append({"setup": setup, "tokens": await tokens_for(seeder, setup)})
            by_user.append(pairs)
        return by_user
    finally:
        seeder.client.close()
        await seeder.running.stop()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("kind", ["refused", "silent", "blackhole"])
async def test_postgres_outage_under_traffic(tmp_path, database_url, receiver, kind):
    """`refused`: the database refuses connections and its backends are terminated (every pooled
    connection dead at once). `silent`: the same through a relay, except that connect attempts
    are met with silence and wait for their timeout. `blackhole`: the relay also leaves the
    connections it carries open and silent, so every query in flight hangs."""
    relays = {"silent": Silent, "blackhole": Blackhole}
    outage = Refused(database_url) if kind == "refused" else await relays[kind](database_url).start()
    server = ServerProcess(outage.database_url, tmp_path / "data", webhook_timeout="2",
                           webhook_retry_schedule=",".join(["1"] * 100))
    by_user = await seed(tmp_path, database_url, receiver, server.url)
    to_revoke = [pair for pairs in by_user for pair in pairs[:REVOKED_APPS]]
    busy = [pair for pairs in by_user for pair in pairs[REVOKED_APPS:]]
    random.Random(8).shuffle(to_revoke)

    # Deliveries fail (503, slowly, so one is in flight when the cut comes) and are retried every ~1 s.
    receiver.default = Answer(503, delay=0.6)
    await server.start()
    traffic = Traffic(server, busy, to_revoke)
    db = open_database(database_url)
    cut, workers = False, []
    try:
        # Events the outbox holds when the outage starts: acknowledged, tried, not delivered.
        queued = []
        for _ in range(QUEUED_BEFORE):
            pair = to_revoke.pop(0)
            r = await server.client.delete(f"/api/auth/authorizations/{pair['setup'].client_id}",
                                           bearer=pair["setup"].token)
            assert r.status == 200, r.text
            traffic.revoked.append({**pair, "eventId": r.data["eventId"]})
            queued.append(r.data["eventId"])
        await wait_until(lambda: (set(queued) <= {x.event_id for x in receiver.received}), 10)

        workers = [asyncio.ensure_future(traffic.worker(job, pause))
                   for job, pause in itertools.chain(
                       [("me", 0.02)] * 3, [("refresh", 0.02)] * 3, [("flow", 0.03)] * 2, [("login", 0.1)])]
        workers.append(asyncio.ensure_future(traffic.revoker(0.5)))
        await asyncio.sleep(2)

        # Every pool connection in use once, so that all sixteen die together at the cut.
        warm = traffic.client()
        warm._http.max_clients = 64  # noqa: SLF001 - all at once, not queued in the client
        pair = busy[0]
        await asyncio.gather(*[warm.post("/api/oauth/token/refresh", form={
            "grant_type": "refresh_token", "refresh_token": pair["tokens"]["refreshToken"],
            "client_id": pair["setup"].client_id, "client_secret": pair["setup"].client_secret})
            for _ in range(40)])
        # Cut while a delivery is in flight (the receiver holds each one 0.6 s).
        seen = len(receiver.received)
        await wait_until(lambda: (len(receiver.received) > seen), 5, step=0.01)
        traffic.phase = "outage"
        cut = True
        outage_started = time.monotonic()
        await outage.cut()

        # A burst that meets the dead pool all at once, beside the steady traffic.
        burst_client = traffic.client()
        burst_client._http.max_clients = 64  # noqa: SLF001 - all at once, not queued in the client
        burst = await asyncio.gather(*[traffic.call("burst", lambda t: burst_client.post(
            "/api/oauth/token/refresh", timeout=t, form={
                "grant_type": "refresh_token", "refresh_token": pair["tokens"]["refreshToken"],
                "client_id": pair["setup"].client_id, "client_secret": pair["setup"].client_secret}))
            for _ in range(64)])
        probes = []
        while time.monotonic() - outage_started < OUTAGE_SECONDS:
            probes.append((await traffic.call("readyz", lambda t: server.client.get("/readyz", timeout=t)),
                           await traffic.call("healthz", lambda t: server.client.get("/healthz", timeout=t))))
            assert server.proc.poll() is None, "the server died during the outage"
            await asyncio.sleep(0.25)
        outage_log_end = len(server_log(server))

        traffic.phase = "after"
        await outage.restore()
        cut = False
        restored = time.monotonic()
        receiver.default = Answer(200)

        async def ready() -> bool:
            return (await server.client.get("/readyz", timeout=GUARD)).status == 200
        await wait_until(ready, 10)
        ready_at = time.monotonic()
        await asyncio.sleep(3)  # the same traffic, now against a database that answers
        traffic.stop = True
        await asyncio.gather(*workers)
        assert server.proc.poll() is None

        # ---- before it -----------------------------------------------------------------------------------
        before = [o for o in traffic.outcomes if o.phase == "before"]
        failed = [p for p in (check_answer(o) or (o.started + o.elapsed < outage_started  # else the cut met it
                                                  and o.response.status != 200 and f"{o.kind} {o.response.status}")
                              for o in before) if p]
        assert before and not failed, f"{len(failed)} of {len(before)} requests failed before the outage: {failed[:5]}"

        # ---- during the outage ----------------------------------------------------------------------
        during_outage = [o for o in traffic.outcomes if o.phase == "outage"]
        problems = [p for p in map(check_answer, during_outage) if p]
        problems += [f"{o.kind}: {o.elapsed:.2f} s" for o in during_outage if o.elapsed > GUARD]
        assert not problems, \
            f"{len(problems)} of {len(during_outage)} answers during the outage are wrong: {problems[:5]}"
        assert len([o for o in during_outage if o.kind not in ("readyz", "healthz")]) > 100  # traffic there was
        assert all(o.response.status == 503 for o in burst), "the dead pool was not met"
        for name in ("me", "refresh", "authorize", "login", "revoke"):  # each kind met the outage
            assert any(o.kind == name for o in during_outage), name
        readyz = [p[0].response.status for p in probes]
        assert readyz and set(readyz) == {503}, readyz
        assert {p[1].response.status for p in probes} == {200}

        # The flusher backed off: few claim attempts, one warning each, no traceback anywhere.
        log = server_log(server)
        during = log[:outage_log_end]
        paused = [x for x in during if x.get("logger") == "lbauth.webhooks" and "paused" in x.get("msg", "")]
        assert 1 <= len(paused) <= 8, f"{len(paused)} claim back-offs in {OUTAGE_SECONDS} s: {paused}"
        tracebacks = [x for x in log if "Traceback" in json.dumps(x)]
        assert not tracebacks, f"{len(tracebacks)} tracebacks in the server log, first: {tracebacks[0]}"
        errors = [x for x in log if x.get("level") in ("error", "critical", "raw")]
        assert not errors, errors[:3]

        # ---- after it, with no restart ------------------------------------------------------------------
        assert ready_at - restored < 10
        after = [o for o in traffic.outcomes if o.phase == "after" and o.started >= ready_at]
        assert len(after) > 50
        failed = [p for p in (check_answer(o) or (o.response.status != 200 and f"{o.kind} {o.response.status}")
                              for o in after) if p]
        assert not failed, f"{len(failed)} of {len(after)} requests failed after /readyz said ready: {failed[:5]}"

        # Every event queued before the outage, and every acknowledged revocation's, is delivered.
        expected = {x["eventId"] for x in traffic.revoked}
        assert set(queued) <= expected and len(expected) > QUEUED_BEFORE

        async def all_delivered() -> bool:
            statuses = await db.read(lambda c: dict(c.execute(
                select(webhook_events.c.id, webhook_events.c.status)).all()))
            return all(statuses.get(e) == "delivered" for e in expected)
        await wait_until(all_delivered, 30, step=0.25)
        got = {x.event_id: x.payload for x in receiver.received}
        assert expected <= set(got)
        for x in traffic.revoked:
            assert got[x["eventId"]]["appId"] == x["setup"].app["appId"]
        pending = await db.read(lambda c: c.execute(select(func.count()).where(
            webhook_events.c.status != "delivered")).scalar())
        assert pending == 0  # nothing stuck (a revocation cut off mid-commit leaves no half event)

        # No acknowledged revocation is lost: the grant is gone, its tokens are refused.
        check = server.client
        for x in traffic.revoked:
            setup: Setup = x["setup"]
            listed = (await check.get("/api/auth/authorizations", bearer=setup.token)).data["items"]
            assert setup.client_id not in {i["clientId"] for i in listed}
            r = await refresh(server, x["tokens"]["refreshToken"], setup.client_id, setup.client_secret)
            r.assert_error(400, "oauth2.refresh_token.revoked")

        async def access_refused() -> bool:
            for x in traffic.revoked:
                me = await check.get("/api/auth/me", bearer=x["tokens"]["accessToken"])
                if me.status != 401 or me.json["subCode"] != "oauth2.token.revoked":
                    return False
            return True
        await wait_until(access_refused, 5)
    finally:
        traffic.stop = True
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if cut:
            await outage.restore()
        traffic.close()
        server.stop()
        await outage.close()
        await db.close()

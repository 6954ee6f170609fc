"""A busy database is not an unreachable one (issue 19, item 2; contract section 3).

A real server process (one worker, as `lbauth serve` runs it) meets, on its fresh pool, 200
authorizations at once over 64 client connections, then 200 code exchanges and 200 refreshes
together the same way. While the database answers, every one of them is served: requests beyond the pool's
connections wait their turn instead of being answered 503 `server.unavailable`.

A slow database is not an unreachable one either: while a lock holds every request that reaches
the database for seconds, the server's watchdog (which tells a partition from a stall) finds
PostgreSQL answering and lets them wait; they are all served once the lock goes.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import asyncpg
import pytest

from lbauth.clock import SystemClock
from tests.client import Client, Response
from tests.conftest import _pg_dsn, start_server
from tests.flow_helpers import Setup, code_for, full_setup, tokens_for
from tests.processes import ServerProcess

pytestmark = pytest.mark.slow

BURST = 200
CONNECTIONS = 64
REFRESH_TOKENS = 20
LOCK_SECONDS = 2.0  # several times the watchdog's stall threshold and its check


async def burst(client: Client, requests: list) -> list[Response]:
    """Every request at once; the client holds CONNECTIONS of them open together."""
    return await asyncio.gather(*[request() for request in requests])


def failures(responses: list[Response]) -> Counter:
    return Counter(f"{r.status} {r.json.get('subCode', '')}".strip() for r in responses if r.status != 200)


async def started(tmp_path, database_url, codes: int, refresh_tokens: int) -> tuple[ServerProcess, Client, Setup,
                                                                                   list[str], list[str]]:
    """A server process (one worker), a client that holds CONNECTIONS requests in flight together,
    and an app with `codes` codes and `refresh_tokens` refresh tokens made in-process beforehand."""
    server = ServerProcess(database_url, tmp_path / "data")
    seeder = await start_server(tmp_path, database_url, env="development", clock=SystemClock(), base_url=server.url)
    try:  # one deployment (the same base URL): what the seeder issues, the server accepts
        await seeder.quiet()
        setup = await full_setup(seeder)
        made_codes = [await code_for(seeder, setup) for _ in range(codes)]
        made_tokens = [(await tokens_for(seeder, setup))["refreshToken"] for _ in range(refresh_tokens)]
    finally:
        seeder.client.close()
        await seeder.running.stop()
    await server.start()
    client = Client(server.url)
    client._http.max_clients = CONNECTIONS  # noqa: SLF001 - this many requests in flight together
    return server, client, setup, made_codes, made_tokens


async def test_bursts_over_64_connections_are_all_served(tmp_path, database_url):
    server, client, setup, codes, refresh_tokens = await started(tmp_path, database_url, BURST, REFRESH_TOKENS)
    credentials = {"client_id": setup.client_id, "client_secret": setup.client_secret}
    try:
        # Authorizations (three statements each) on the server's fresh pool.
        asked = {"clientId": setup.client_id, "redirectUri": setup.redirect_uri, "scope": ["userinfo"]}
        authorized = await burst(client, [lambda: client.post("/api/oauth/authorize/external", json=asked,
                                                              bearer=setup.token)] * BURST)

        # Then the exchanges and the refreshes together.
        exchanges = [lambda code=code: client.post("/api/oauth/token/code", form={
            "grant_type": "authorization_code", "code": code, "redirect_uri": setup.redirect_uri, **credentials})
            for code in codes]
        refreshes = [lambda token=token: client.post("/api/oauth/token/refresh", form={
            "grant_type": "refresh_token", "refresh_token": token, **credentials})
            for token in refresh_tokens * (BURST // REFRESH_TOKENS)]  # no rotation: each is used again
        answers = await burst(client, [request for pair in zip(exchanges, refreshes, strict=True) for request in pair])
        exchanged, refreshed = answers[0::2], answers[1::2]

        problems = {name: failures(responses) for name, responses in
                    (("code exchange", exchanged), ("refresh", refreshed), ("authorize", authorized))}
        assert not any(problems.values()), f"non-200 answers under load: {problems}"
        assert len({r.data["accessToken"] for r in exchanged + refreshed}) == 2 * BURST  # each its own token
    finally:
        client.close()
        server.stop()


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_requests_held_by_a_lock_wait_and_are_served(tmp_path, database_url):
    """Every refresh, 40 at once (more than the pool's 16 connections), waits LOCK_SECONDS for a
    table lock that another session holds; none is answered 503, and the server never calls the
    database unreachable."""
    server, client, setup, _, [refresh_token] = await started(tmp_path, database_url, 0, 1)
    form = {"grant_type": "refresh_token", "refresh_token": refresh_token,
            "client_id": setup.client_id, "client_secret": setup.client_secret}
    locker = await asyncpg.connect(_pg_dsn(database_url))
    try:
        assert (await client.post("/api/oauth/token/refresh", form=form)).status == 200  # the pool is warm
        lock = locker.transaction()
        await lock.start()
        await locker.execute("LOCK TABLE refresh_tokens IN ACCESS EXCLUSIVE MODE")
        held = asyncio.gather(*[client.post("/api/oauth/token/refresh", form=form, timeout=30) for _ in range(40)])
        await asyncio.sleep(LOCK_SECONDS)
        await lock.rollback()
        answers = await held
        assert not failures(answers), f"non-200 answers behind a lock: {failures(answers)}"
        assert "unreachable" not in server.log.read_text()
    finally:
        await locker.close()
        client.close()
        server.stop()

"""Several server processes on one database, and crashes: revocations reach every process within
5 s; the webhook outbox delivers every event, exactly once when nothing crashes and at least once
when a process is killed mid-burst (contract sections 7 and 10)."""

from __future__ import annotations

import asyncio
import collections
import time

import pytest
from sqlalchemy import func, select
from tornado.httpclient import HTTPClientError

from lbauth.clock import FrozenClock, SystemClock
from lbauth.core.accounts import accounts
from lbauth.core.clients import outbox
from lbauth.core.oauth.authorization.codes import issue_code
from lbauth.core.oauth.authorization.endpoint import load_client
from lbauth.core.oauth.authorization.request import check_api_request
from lbauth.storage.db import open_database
from lbauth.storage.models import grants, webhook_events
from tests.conftest import start_server
from tests.flow_helpers import full_setup, refresh, tokens_for
from tests.processes import ServerProcess
from tests.receiver import Answer
from tests.support import wait_until

pytestmark = pytest.mark.slow


async def test_a_revocation_reaches_another_process_within_5_seconds(tmp_path, database_url):
    first = await start_server(tmp_path, database_url, env="development", clock=FrozenClock(time.time()))
    # One deployment: every process shares the public base URL, so issuer and audience agree.
    second = await ServerProcess(database_url, tmp_path / "data", base_url=first.url).start()
    try:
        setup = await full_setup(first)
        tokens = await tokens_for(first, setup)
        assert (await second.client.get("/api/auth/me", bearer=tokens["accessToken"])).status == 200

        r = await first.client.delete(f"/api/auth/authorizations/{setup.client_id}", bearer=setup.token)
        assert r.status == 200
        introspected = await second.client.post("/oauth/introspect", form={
            "token": tokens["accessToken"], "client_id": setup.client_id, "client_secret": setup.client_secret})
        assert introspected.json == {"active": False}  # at once: introspection reads the database

        async def refused() -> bool:
            me = await second.client.get("/api/auth/me", bearer=tokens["accessToken"])
            return me.status == 401 and me.json["subCode"] == "oauth2.token.revoked"
        await wait_until(refused, 5)  # raises unless the other process refuses it within 5 s
        # What the app sees from then on, at the other process: the token refused as revoked, with
        # RFC 6750's challenge, for user info too, and the grant's refresh token refused.
        me = await second.client.get("/api/auth/me", bearer=tokens["accessToken"])
        me.assert_error(401, "oauth2.token.revoked")
        assert me.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
        (await second.client.get("/api/service/user/info", bearer=tokens["accessToken"])).assert_error(
            401, "oauth2.token.revoked")
        (await refresh(second, tokens["refreshToken"], setup.client_id, setup.client_secret)).assert_error(
            400, "oauth2.refresh_token.revoked")
    finally:
        second.stop()
        first.client.close()
        await first.running.stop()


@pytest.mark.parametrize("backend", ["postgresql", "sqlite"], indirect=True)
async def test_two_processes_deliver_500_events_exactly_once(tmp_path, database_url, receiver):
    seed = await start_server(tmp_path, database_url, env="development", clock=SystemClock())
    setup = await full_setup(seed, webhook_url=receiver.url)
    app_id = setup.app["appId"]
    seed.client.close()
    await seed.running.stop()  # it plays no part in delivering

    db = open_database(database_url)
    try:
        now = int(time.time())
        await db.transaction(lambda conn: [outbox.write_event(conn, app_id=app_id, asu=f"asu_bulk_{i}",
                                                              reason=outbox.TEST_DELIVERY, now=now)
                                           for i in range(500)])
        servers = [await ServerProcess(database_url, tmp_path / "data").start() for _ in range(2)]
        try:
            async def all_delivered() -> bool:
                return len({r.event_id for r in receiver.received}) >= 500
            await wait_until(all_delivered, 90)
            await asyncio.sleep(1)  # room for any duplicate to show up
        finally:
            for server in servers:
                server.stop()
        counts = collections.Counter(r.event_id for r in receiver.received)
        assert len(counts) == 500 and set(counts.values()) == {1}
        statuses = await db.read(lambda c: dict(c.execute(
            select(webhook_events.c.status, func.count()).group_by(webhook_events.c.status)).all()))
        assert statuses == {"delivered": 500}
    finally:
        await db.close()


async def test_sigkill_during_a_burst_of_200_revocations_loses_no_event(tmp_path, database_url, receiver):
    receiver.default = Answer(200, delay=0.02)  # keep deliveries in flight when the kill comes
    seed = await start_server(tmp_path, database_url, env="development", clock=SystemClock())
    user = await seed.create_user()
    client_ids = []
    for i in range(200):
        app = await seed.create_app(user["email"], name=f"App {i}", webhook_url=receiver.url)
        redirect_uri = app["redirectUris"][0]
        loaded = await load_client(seed.db, app["clientId"], redirect_uri)
        request = check_api_request(loaded, redirect_uri, ["userinfo"], None, None, None)
        await issue_code(seed.db, seed.clock, request, user["userId"], 300)
        client_ids.append(app["clientId"])
    session = await accounts.sign_in(seed.db, seed.clock, 3600, user["email"], user["password"])
    seed.client.close()
    await seed.running.stop()

    server = await ServerProcess(database_url, tmp_path / "data", webhook_timeout="1").start()
    answered = []
    gate = asyncio.Semaphore(16)

    async def revoke(client_id: str) -> None:
        async with gate:
            try:
                r = await server.client.delete(f"/api/auth/authorizations/{client_id}", bearer=session.token)
            except (OSError, HTTPClientError):  # in flight when the process died: no answer
                return
            if r.status == 200:
                answered.append(client_id)

    burst = [asyncio.ensure_future(revoke(c)) for c in client_ids]
    await wait_until(lambda: (len(answered) >= 80), 30, step=0.005)
    server.kill()
    await asyncio.gather(*burst)
    assert 80 <= len(answered) < 200  # the kill did land mid-burst

    restarted = await ServerProcess(database_url, tmp_path / "data", webhook_timeout="1").start()
    db = open_database(database_url)
    try:
        async def revoked_apps() -> set[str]:
            return set(await db.read(lambda c: list(c.execute(
                select(grants.c.app_id).where(grants.c.revoked_at.is_not(None))).scalars())))

        revoked = await revoked_apps()
        assert len(revoked) >= len(answered)  # every acknowledged revocation was committed

        async def all_received() -> bool:
            return revoked <= {r.payload["appId"] for r in receiver.received}
        await wait_until(all_received, 60)
        events = await db.read(lambda c: list(c.execute(select(webhook_events.c.app_id, webhook_events.c.reason))))
        assert {app_id for app_id, _ in events} == revoked  # no revocation without its event, and none extra
        assert collections.Counter(app_id for app_id, _ in events) == collections.Counter(revoked)
    finally:
        restarted.stop()
        await db.close()


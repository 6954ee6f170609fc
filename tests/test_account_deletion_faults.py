"""Account changes when things are not quiet (contract sections 10 and 16): webhook events queued
for a receiver that is down are all delivered once it is back; token exchanges racing a deletion
leave no token that works after the deletion's answer; sign-ins racing a disable or a password
change leave no session that the change should have ended; authorizations racing a disable, a
deletion or the app's revocation leave no code that gives a working token."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest

from lbauth.clock import SystemClock
from lbauth.core.clients import outbox
from lbauth.handlers.operator_json import event_json
from tests.account_helpers import (
    assert_user_token_revoked,
    change_password,
    delete_account,
    sessions_of,
)
from tests.client import Client
from tests.conftest import arun_cli, start_server
from tests.flow_helpers import Setup, authorize, code_for, exchange, full_setup, refresh, tokens_for
from tests.receiver import Receiver
from tests.support import unverified_claims, wait_until

pytestmark = pytest.mark.slow

SCHEDULE = (10, 20, 30)


@pytest.fixture
async def hooked(tmp_path, database_url):
    """Webhooks to loopback allowed (development); deliveries happen only when the test flushes."""
    srv = await start_server(tmp_path, database_url, env="development", webhook_timeout=1,
                             webhook_retry_schedule=",".join(map(str, SCHEDULE)))
    await srv.quiet()
    yield srv
    srv.client.close()
    await srv.running.stop()


async def test_events_queued_while_the_receiver_is_down_are_all_delivered_after_a_deletion(hooked):
    server = hooked
    down = Receiver()
    port, url = down.port, down.url
    await down.stop()  # the app's receiver is down: connections are refused

    s = await full_setup(server, name="First", webhook_url=url)
    apps = [s] + [Setup(s.user, s.token, await server.create_app(s.user["email"], name=name,
                                                                 redirect_uris=[s.redirect_uri], webhook_url=url))
                  for name in ("Second", "Third")]
    for each in apps:
        await tokens_for(server, each)
    # One event is already queued (and failing) before the deletion: the user revoked the first app.
    r = await server.client.delete(f"/api/auth/authorizations/{s.client_id}", bearer=s.token)
    assert r.status == 200, r.text
    await server.running.deliverer.flush()

    r = await delete_account(server, s.token, s.user["password"])
    assert r.status == 200 and r.data["revokedAuthorizations"] == 2, r.text
    await server.running.deliverer.flush()
    queued = [event_json(e) for e in await outbox.list_events(server.db)]
    assert len(queued) == 3 and {e["status"] for e in queued} == {"pending"}, queued
    assert all(e["attempts"] >= 1 for e in queued)  # each was tried, and failed: the receiver is down

    back = Receiver(port)  # the receiver comes back, on the same address
    try:
        server.clock.advance(max(SCHEDULE) * 1.1 + 1)
        await server.running.deliverer.flush()
        delivered = {hook.event_id: hook.payload for hook in back.received}
        assert set(delivered) == {e["eventId"] for e in queued}  # none lost
        assert {p["appId"] for p in delivered.values()} == {each.app["appId"] for each in apps}
        assert {(p["eventType"], p["reason"]) for p in delivered.values()} == {("authorization.revoked",
                                                                               "user_revoked")}
        assert {e.status for e in await outbox.list_events(server.db)} == {"delivered"}
    finally:
        await back.stop()


async def test_no_token_from_an_exchange_racing_the_deletion_works_after_its_answer(tmp_path, database_url):
    """Exchanges and refreshes run without pause, eight at a time, while the account is deleted;
    once the deletion has answered, every access token any of them got is refused as revoked and
    every refresh token as revoked, whenever it was issued."""
    server = await start_server(tmp_path, database_url, clock=SystemClock())
    fast = Client(server.url, max_clients=32)
    as_client = SimpleNamespace(client=fast)
    try:
        s = await full_setup(server)
        first = await tokens_for(server, s)
        codes = [await code_for(server, s) for _ in range(150)]
        refresh_tokens = [first["refreshToken"]]
        access_tokens = [first["accessToken"]]
        deleted_at: list[float] = []
        in_flight_at_answer: list[bool] = []

        async def worker(n: int) -> None:
            while codes:
                started = time.monotonic()
                if n % 4 == 0:  # a quarter of the workers refresh, the rest exchange codes
                    r = await refresh(as_client, refresh_tokens[0], s.client_id, s.client_secret)
                else:
                    r = await exchange(as_client, codes.pop(), s.redirect_uri, s.client_id, s.client_secret)
                if deleted_at and started < deleted_at[0]:
                    in_flight_at_answer.append(True)
                assert r.status in (200, 400), r.text
                if r.status == 200:
                    access_tokens.append(r.data["accessToken"])
                    refresh_tokens.append(r.data["refreshToken"])
                if deleted_at and time.monotonic() - deleted_at[0] > 0.5:
                    return  # well past the answer: the race is over

        async def deletion() -> None:
            await asyncio.sleep(0.05)  # the workers are under way
            r = await delete_account(as_client, s.token, s.user["password"])
            deleted_at.append(time.monotonic())
            assert r.status == 200, r.text

        await asyncio.gather(deletion(), *(worker(n) for n in range(8)))
        assert in_flight_at_answer, "no exchange was in flight when the deletion answered"
        assert len(access_tokens) > 1  # some exchanges did win the race

        for token in access_tokens:
            me = await server.client.get("/api/auth/me", bearer=token)
            me.assert_error(401, "oauth2.token.revoked")
        for token in set(refresh_tokens):
            (await refresh(server, token, s.client_id, s.client_secret)).assert_error(
                400, "oauth2.refresh_token.revoked")
        for code in codes[:5]:  # what was never exchanged cannot be any more
            r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
            assert r.status == 400 and r.json["subCode"].startswith("oauth2.code."), r.text
        r = await authorize(server, s.token, s.client_id, s.redirect_uri)
        r.assert_error(401, "oauth2.token.revoked")
    finally:
        fast.close()
        server.client.close()
        await server.running.stop()


async def sign_in_until_refused(server, email: str, password: str, issued: list[str]) -> None:
    """Sign in again and again, keeping each token, until the server refuses the password."""
    while True:
        r = await server.client.post("/api/auth/login", json={"email": email, "password": password})
        if r.status != 200:
            r.assert_error(401, "auth.login.failed")
            return
        issued.append(r.data["token"])


async def test_a_sign_in_racing_a_disable_gives_no_token_that_works_after_enable(tmp_path, database_url):
    """Sign-ins run without pause, four at a time, while an operator disables the account; after
    `enable`, none of their tokens works: each was either issued before the disable (and ended by
    it) or should not have been issued at all."""
    server = await start_server(tmp_path, database_url, clock=SystemClock())
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
    issued: list[str] = []
    signers: list[asyncio.Future] = []
    try:
        user = await server.create_user()
        signers = [asyncio.ensure_future(sign_in_until_refused(server, user["email"], user["password"], issued))
                   for _ in range(4)]
        # the race is on once sign-ins are coming (a fast `disable` could otherwise win before any)
        await wait_until(lambda: len(issued) >= 4, 30, step=0.01)
        result = await arun_cli("users", "disable", user["email"], "--json", env=env)
        assert result.returncode == 0, result.stderr
        await asyncio.wait_for(asyncio.gather(*signers), 30)  # each ends at its first refusal
        assert len(issued) >= 4
        result = await arun_cli("users", "enable", user["email"], "--json", env=env)
        assert result.returncode == 0, result.stderr

        for token in issued:
            await assert_user_token_revoked(server, token)
        fresh = await server.login(user["email"], user["password"])  # enabled again
        assert len(await sessions_of(server, fresh)) == 1
    finally:
        for signer in signers:
            signer.cancel()
        server.client.close()
        await server.running.stop()


async def test_a_sign_in_with_the_old_password_racing_its_change_gives_no_working_token(server):
    """Sign-ins with the old password run without pause while the user changes it; once the
    change has answered, the caller's session is the only one that works."""
    user = await server.create_user()
    keeper = await server.login(user["email"], user["password"])
    issued: list[str] = []
    signers = [asyncio.ensure_future(sign_in_until_refused(server, user["email"], user["password"], issued))
               for _ in range(4)]
    try:
        await wait_until(lambda: len(issued) >= 4, 30, step=0.01)  # the sign-ins are under way
        r = await change_password(server, keeper, user["password"], "a brand new password")
        assert r.status == 200, r.text
        await asyncio.wait_for(asyncio.gather(*signers), 30)
    finally:
        for signer in signers:
            signer.cancel()
    assert issued
    for token in issued:
        await assert_user_token_revoked(server, token)
    assert [item["current"] for item in await sessions_of(server, keeper)] == [True]



# ---- authorizations racing the changes that must stop them -----------------------------------------------

async def authorize_until_refused(server, setup: Setup, codes: list[str], stop: list[bool]) -> None:
    """Ask for codes again and again (POST /api/oauth/authorize/external), keeping each, until the
    user token is refused or `stop` is set."""
    while not stop:
        r = await authorize(server, setup.token, setup.client_id, setup.redirect_uri)
        if r.status != 200:
            r.assert_error(401, "oauth2.token.revoked")
            return
        codes.append(r.data["code"])


async def exchanged(server, setup: Setup, codes: list[str]) -> list[dict]:
    """The token sets the codes still give (each code tried once)."""
    sets = []
    for code in codes:
        r = await exchange(server, code, setup.redirect_uri, setup.client_id, setup.client_secret)
        if r.status == 200:
            sets.append(r.data)
        else:
            assert r.status == 400 and r.json["subCode"].startswith("oauth2.code."), r.text
    return sets


async def test_an_authorization_racing_a_disable_gives_no_code_that_still_works(tmp_path, database_url):
    """Codes are asked for without pause, six at a time (three apps already authorized, three
    authorized for the first time), while an operator disables the account: once the disable has
    answered, none of those codes can be exchanged, and after `enable` none of them either."""
    server = await start_server(tmp_path, database_url, clock=SystemClock())
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
    loops: list[asyncio.Future] = []
    try:
        s = await full_setup(server)
        apps = [s] + [Setup(s.user, s.token, await server.create_app(s.user["email"], name=f"App {i}",
                                                                     redirect_uris=[s.redirect_uri]))
                      for i in range(5)]
        for each in apps[:3]:
            await code_for(server, each)  # a live grant: codes are issued under it
        codes: dict[str, list[str]] = {each.client_id: [] for each in apps}
        loops = [asyncio.ensure_future(authorize_until_refused(server, each, codes[each.client_id], []))
                 for each in apps]
        # the race is on once codes are coming (a fast `disable` could otherwise win before any was asked)
        await wait_until(lambda: sum(map(len, codes.values())) >= len(apps), 30, step=0.01)
        result = await arun_cli("users", "disable", s.user["email"], "--json", env=env)
        assert result.returncode == 0, result.stderr
        await asyncio.wait_for(asyncio.gather(*loops), 30)
        assert sum(map(len, codes.values())) >= len(apps)
        for each in apps:
            assert await exchanged(server, each, codes[each.client_id]) == []
        result = await arun_cli("users", "enable", s.user["email"], "--json", env=env)
        assert result.returncode == 0, result.stderr
        for each in apps:
            assert await exchanged(server, each, codes[each.client_id][-3:]) == []
    finally:
        for loop in loops:
            loop.cancel()
        server.client.close()
        await server.running.stop()


async def test_an_authorization_racing_the_deletion_gives_no_code_that_works(server):
    s = await full_setup(server)
    apps = [s] + [Setup(s.user, s.token, await server.create_app(s.user["email"], name=f"App {i}",
                                                                 redirect_uris=[s.redirect_uri]))
                  for i in range(3)]
    for each in apps[:2]:
        await code_for(server, each)
    codes: dict[str, list[str]] = {each.client_id: [] for each in apps}
    loops = [asyncio.ensure_future(authorize_until_refused(server, each, codes[each.client_id], []))
             for each in apps]
    try:
        await wait_until(lambda: sum(map(len, codes.values())) >= 2 * len(apps), 30, step=0.01)
        r = await delete_account(server, s.token, s.user["password"])
        assert r.status == 200, r.text
        await asyncio.wait_for(asyncio.gather(*loops), 30)
    finally:
        for loop in loops:
            loop.cancel()
    for each in apps:
        assert await exchanged(server, each, codes[each.client_id]) == []


async def test_an_authorization_racing_the_apps_revocation_gives_no_token_of_the_revoked_grant(server):
    """Codes are asked for without pause while the user revokes the app. Codes asked for after
    the revocation belong to a new grant (the user authorized the app again); none of the revoked
    grant's may give a token that works."""
    s = await full_setup(server)
    revoked_grant = unverified_claims((await tokens_for(server, s))["accessToken"])["gid"]
    codes: list[str] = []
    stop: list[bool] = []
    loops = [asyncio.ensure_future(authorize_until_refused(server, s, codes, stop)) for _ in range(6)]
    try:
        await wait_until(lambda: len(codes) >= 6, 30, step=0.01)
        r = await server.client.delete(f"/api/auth/authorizations/{s.client_id}", bearer=s.token)
        assert r.status == 200, r.text
        stop.append(True)
        await asyncio.wait_for(asyncio.gather(*loops), 30)
    finally:
        for loop in loops:
            loop.cancel()
    for tokens in await exchanged(server, s, codes):
        if unverified_claims(tokens["accessToken"])["gid"] == revoked_grant:
            r = await server.client.get("/api/auth/me", bearer=tokens["accessToken"])
            r.assert_error(401, "oauth2.token.revoked")
            (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)).assert_error(
                400, "oauth2.refresh_token.revoked")

"""Account changes across processes (contract section 16): two real `lbauth serve` processes, A and
B, on one database (one deployment: the same public base URL and master key). What is changed on
A, or by the operator's `lbauth users disable` in a third process, is honoured by B within 5 s,
after B has already seen (and cached) the session or user it concerns."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

import pytest

from lbauth.clock import SystemClock
from tests.account_helpers import (
    PROPAGATION_SECONDS,
    copy_of,
    current_session_id,
    end_session,
    patch_profile,
    sessions_of,
    shows_sign_in_form,
    signed_in_browser,
)
from tests.conftest import arun_cli, start_server
from tests.flow_helpers import REGISTERED_URI, authorize, exchange
from tests.processes import ServerProcess
from tests.support import wait_until

pytestmark = pytest.mark.slow


@dataclass
class Deployment:
    a: ServerProcess
    b: ServerProcess
    user: dict
    app: dict
    env: dict[str, str]

    @property
    def client_id(self) -> str:
        return self.app["clientId"]


@pytest.fixture
async def deployment(tmp_path, database_url):
    data_dir = tmp_path / "data"
    seed = await start_server(tmp_path, database_url, env="development", clock=SystemClock())
    try:
        user = await seed.create_user(name="Before Edit")
        app = await seed.create_app(user["email"], redirect_uris=[REGISTERED_URI])
    finally:
        seed.client.close()
        await seed.running.stop()  # it plays no part: A and B are the deployment
    a = await ServerProcess(database_url, data_dir).start()
    b = None
    try:
        b = await ServerProcess(database_url, data_dir, base_url=a.url).start()
        yield Deployment(a, b, user, app, {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(data_dir)})
    finally:
        if b is not None:
            b.stop()
        a.stop()


async def login(process: ServerProcess, user: dict) -> str:
    r = await process.client.post("/api/auth/login", json={"email": user["email"], "password": user["password"]})
    assert r.status == 200, r.text
    return r.data["token"]


async def access_token(process: ServerProcess, d: Deployment, user_token: str) -> str:
    code = (await authorize(process, user_token, d.client_id, REGISTERED_URI)).data["code"]
    r = await exchange(process, code, REGISTERED_URI, d.client_id, d.app["clientSecret"])
    assert r.status == 200, r.text
    return r.data["accessToken"]


async def refused(process: ServerProcess, path: str, token: str) -> bool:
    r = await process.client.get(path, bearer=token)
    return r.status == 401 and r.json["subCode"] == "oauth2.token.revoked"


async def test_a_session_ended_on_a_is_refused_by_b_within_5_seconds(deployment):
    d = deployment
    keeper = await login(d.a, d.user)
    stolen = await login(d.a, d.user)
    stolen_id = await current_session_id(d.b, stolen)  # B has seen the stolen token, and caches it
    browser, _ = await signed_in_browser(d.a, d.user["email"], d.user["password"])
    on_b = copy_of(browser)
    on_b.server, on_b.base, on_b.client = d.b, d.b.url, d.b.client  # the same cookie, sent to B
    assert not await shows_sign_in_form(on_b)
    (web,) = [i for i in await sessions_of(d.a, keeper) if i["kind"] == "browser"]

    assert (await end_session(d.a, keeper, stolen_id)).status == 200
    assert (await end_session(d.a, keeper, web["sessionId"])).status == 200
    started = time.monotonic()
    await wait_until(lambda: refused(d.b, "/api/account/sessions", stolen), PROPAGATION_SECONDS, since=started)
    await wait_until(lambda: shows_sign_in_form(on_b), PROPAGATION_SECONDS, since=started)
    r = await authorize(d.b, stolen, d.client_id, REGISTERED_URI)
    r.assert_error(401, "oauth2.token.revoked")
    assert len(await sessions_of(d.b, keeper)) == 1  # the session that ended them goes on, on B too


async def test_a_profile_edit_on_a_is_seen_by_b_within_5_seconds(deployment):
    d = deployment
    token = await login(d.a, d.user)
    access = await access_token(d.a, d, token)  # issued before the edit
    before = await d.b.client.get("/api/auth/me", bearer=access)  # B reads the user now, and caches it
    assert before.status == 200 and before.data["name"] == "Before Edit"
    info = await d.b.client.get("/api/service/user/info", bearer=access)
    assert info.status == 200 and info.data["bio"] == ""

    r = await patch_profile(d.a, token, {"name": "After Edit", "bio": "changed on A"})
    assert r.status == 200, r.text

    async def b_shows_the_edit() -> bool:
        shown = (await d.b.client.get("/api/auth/me", bearer=access)).data
        return shown["name"] == "After Edit" and shown["bio"] == "changed on A"
    await wait_until(b_shows_the_edit, PROPAGATION_SECONDS)
    info = (await d.b.client.get("/api/service/user/info", bearer=access)).data
    assert info["name"] == "After Edit" and info["bio"] == "changed on A"


async def test_an_operators_disable_is_honoured_by_both_processes_within_5_seconds(deployment):
    d = deployment
    tokens = {process.url: await login(process, d.user) for process in (d.a, d.b)}
    access = await access_token(d.a, d, tokens[d.a.url])
    for process in (d.a, d.b):  # each has seen every token, and cached the user and the sessions
        for token in tokens.values():
            assert (await process.client.get("/api/account/sessions", bearer=token)).status == 200
        assert (await process.client.get("/api/auth/me", bearer=access)).status == 200

    result = await arun_cli("users", "disable", d.user["email"], "--json", env=d.env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["status"] == "disabled"
    started = time.monotonic()

    async def everything_refused_by(process: ServerProcess) -> bool:
        checks = [refused(process, "/api/auth/me", access)]
        checks += [refused(process, "/api/account/sessions", token) for token in tokens.values()]
        return all(await asyncio.gather(*checks))
    await asyncio.gather(*(wait_until(lambda p=p: everything_refused_by(p), PROPAGATION_SECONDS, since=started)
                           for p in (d.a, d.b)))
    for process in (d.a, d.b):
        r = await process.client.post("/api/auth/login", json={"email": d.user["email"],
                                                               "password": d.user["password"]})
        r.assert_error(401, "auth.login.failed")

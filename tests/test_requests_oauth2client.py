"""Pushed authorization requests and DPoP with another client users pick: `requests-oauth2client`
(synchronous, run in a thread while lbauth serves). It discovers lbauth, pushes a DPoP-bound request
(`dpop_jkt` from its own key), the user signs in and approves over real HTTP, and it exchanges the
code, refreshes and calls /api/auth/me with its DPoP tokens as `requests` auth. Its proofs carry the
real time, so this server's clock starts now."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import pytest
import requests
import requests_oauth2client

from lbauth.clock import FrozenClock
from tests.conftest import running_server
from tests.flow_helpers import PageSession, full_setup, redirect_query
from tests.support import unverified_claims


@pytest.fixture
async def now_server(tmp_path, database_url):
    async with running_server(tmp_path, database_url, clock=FrozenClock(time.time())) as server:
        yield server


async def test_requests_oauth2client_pushes_a_dpop_bound_request_and_uses_its_tokens(now_server):
    srv = now_server
    setup = await full_setup(srv)

    def discover():
        return requests_oauth2client.OAuth2Client.from_discovery_endpoint(
            srv.url + "/.well-known/openid-configuration", issuer=srv.url, client_id=setup.client_id,
            client_secret=setup.client_secret, redirect_uri=setup.redirect_uri, testing=True,
            dpop_bound_access_tokens=True)
    client = await asyncio.to_thread(discover)
    # A plain OAuth request: 1.8.0's ID-token validation fails on a DPoP token set (a TypeError in
    # its copy of DPoPToken), whatever the server sends.
    request = client.authorization_request(scope="userinfo profile", nonce=None)
    pushed = await asyncio.to_thread(client.pushed_authorization_request, request)
    url = urlsplit(str(pushed.uri))
    assert url.path == "/oauth/" and "request_uri=urn" in url.query and "dpop_jkt" not in url.query

    browser = PageSession(srv)
    page = await browser.open_logged_in(f"{url.path}?{url.query}", setup.user["email"], setup.user["password"])
    page = await browser.decide(page, "approve")
    assert "code" in redirect_query(page.location, setup.redirect_uri)

    response = request.validate_callback(page.location)
    token = await asyncio.to_thread(client.authorization_code, response)
    assert token.token_type.lower() == "dpop"
    claims = unverified_claims(token.access_token.removeprefix("lba_at_"))
    assert claims["cnf"] == {"jkt": request.dpop_key.dpop_jkt}
    refreshed = await asyncio.to_thread(client.refresh_token, token)
    assert refreshed.token_type.lower() == "dpop"

    me = await asyncio.to_thread(requests.get, srv.url + "/api/auth/me", auth=refreshed, timeout=10)
    assert me.status_code == 200, me.text
    assert me.json()["data"]["userId"] == setup.user["userId"]
    as_bearer = await asyncio.to_thread(requests.get, srv.url + "/api/auth/me", timeout=10,
                                        headers={"Authorization": f"Bearer {refreshed.access_token}"})
    assert as_bearer.status_code == 401


async def test_requests_oauth2client_polls_the_device_grant_for_dpop_bound_tokens(now_server):
    """Its `authorize_device()` and `DeviceAuthorizationPollingJob` (DPoP by default here): pending
    while the user has not approved, then tokens bound to its key. The server's clock moves with real
    time, as polling needs."""
    srv = now_server
    user = await srv.create_user()
    app = await srv.create_app(user["email"], name="Kitchen Speaker", device=True)

    async def tick() -> None:
        while True:
            await asyncio.sleep(0.25)
            srv.clock.advance(0.25)
    ticking = asyncio.ensure_future(tick())
    try:
        def discover():
            return requests_oauth2client.OAuth2Client.from_discovery_endpoint(
                srv.url + "/.well-known/openid-configuration", issuer=srv.url, client_id=app["clientId"],
                client_secret=app["clientSecret"], testing=True, dpop_bound_access_tokens=True,
                # 1.8.0's discovery reads no device_authorization_endpoint: given as its README does
                device_authorization_endpoint=srv.url + "/oauth/device_authorization")
        client = await asyncio.to_thread(discover)
        started = await asyncio.to_thread(client.authorize_device, scope="userinfo profile")
        # device_code() defaults to dpop=False, whatever the client says: asked for here.
        job = requests_oauth2client.DeviceAuthorizationPollingJob(client, started, dpop=True)
        assert await asyncio.to_thread(job) is None  # authorization_pending: the user has not approved yet

        browser = PageSession(srv)
        page = await browser.open_logged_in(urlsplit(started.verification_uri_complete).path + "?"
                                            + urlsplit(started.verification_uri_complete).query,
                                            user["email"], user["password"])
        form = next(f for f in page.forms if f.has_input("user_code"))
        page = await browser.submit(page, form, {"user_code": started.user_code.lower().replace("-", "")})
        page = await browser.decide(page, "approve")
        assert "You can return to your device" in page.text

        token = None
        for _ in range(5):
            token = await asyncio.to_thread(job)
            if token is not None:
                break
    finally:
        ticking.cancel()
    assert token is not None and token.token_type.lower() == "dpop"
    me = await asyncio.to_thread(requests.get, srv.url + "/api/auth/me", auth=token, timeout=10)
    assert me.status_code == 200 and me.json()["data"]["userId"] == user["userId"], me.text

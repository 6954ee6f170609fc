"""The device authorization grant (RFC 8628): a device asks /oauth/device_authorization for a device
code and a user code, its user enters the user code at {auth_url}/device and approves, and the
device polls /oauth/token until its tokens come, once. Real server, real HTTP, both databases; the
frozen clock moves for the interval and the expiry."""

from __future__ import annotations

import hashlib
import json
import re
from urllib.parse import urlsplit

import pytest
from sqlalchemy import select

from lbauth.handlers.operator_json import app_json
from lbauth.storage.models import device_codes, webhook_events
from tests.conftest import arun_cli, start_server
from tests.flow_helpers import Page, PageSession, Setup, full_setup
from tests.revocation_helpers import assert_revoked_at_me, assert_works_at_me, revoke_app
from tests.support import basic_auth

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
USER_CODE = re.compile(r"[BCDFGHJKLMNPQRSTVWXZ]{4}-[BCDFGHJKLMNPQRSTVWXZ]{4}")
WARNING = "Continue only if you started this on a device in front of you"


@pytest.fixture
async def srv(tmp_path, database_url):
    server = await start_server(tmp_path, database_url)
    yield server
    server.client.close()
    await server.running.stop()


def client_auth(setup: Setup) -> dict:
    """client_secret_basic for a confidential app; a public client names itself in the form."""
    if setup.client_secret is None:
        return {"form": {"client_id": setup.client_id}, "headers": {}}
    return {"form": {}, "headers": {"Authorization": basic_auth(setup.client_id, setup.client_secret)}}


async def device_authorization(server, setup: Setup, **params):
    auth = client_auth(setup)
    return await server.client.post("/oauth/device_authorization", form={**auth["form"], **params},
                                    headers=auth["headers"])


async def started(server, setup: Setup, **params) -> dict:
    r = await device_authorization(server, setup, **params)
    assert r.status == 200, r.text
    return r.json


async def poll(server, setup: Setup, device_code: str, **extra):
    auth = client_auth(setup)
    return await server.client.post("/oauth/token", headers=auth["headers"], form={
        **auth["form"], "grant_type": DEVICE_GRANT, "device_code": device_code, **extra})


def assert_rfc_error(response, error: str, status: int = 400) -> None:
    assert response.status == status, response.text
    assert response.json["error"] == error and response.json["error_description"], response.text


def code_form(page: Page):
    form = next((f for f in page.forms if f.has_input("user_code")), None)
    assert form is not None, f"no code form on {page.url}: {page.text[:300]}"
    return form


async def enter_code(browser: PageSession, page: Page, typed: str) -> Page:
    return await browser.submit(page, code_form(page), {"user_code": typed})


async def signed_in_at_device_page(server, setup: Setup, path: str = "/device") -> tuple[PageSession, Page]:
    browser = PageSession(server)
    page = await browser.open_logged_in(path, setup.user["email"], setup.user["password"])
    assert page.status == 200, page.text[:300]
    return browser, page


async def answer(server, setup: Setup, user_code: str, decision: str) -> Page:
    """The user signs in at /device, enters the code and presses Approve or Deny."""
    browser, page = await signed_in_at_device_page(server, setup)
    consent = await enter_code(browser, page, user_code)
    assert consent.consent_form() is not None, consent.text[:300]
    done = await browser.decide(consent, decision)
    assert done.status == 200 and "You can return to your device" in done.text, done.text[:300]
    return done


async def assert_code_refused(server, setup: Setup, user_code: str) -> None:
    """Entered at /device, the code gives the form again with the error, not the consent page."""
    browser, page = await signed_in_at_device_page(server, setup)
    refused = await enter_code(browser, page, user_code)
    assert refused.status == 400 and refused.consent_form() is None, refused.text[:300]
    assert "not valid or has expired" in refused.text and code_form(refused), refused.text[:300]


async def tokens_by_device(server, setup: Setup, **params) -> dict:
    flow = await started(server, setup, **params)
    await answer(server, setup, flow["user_code"], "approve")
    r = await poll(server, setup, flow["device_code"])
    assert r.status == 200, r.text
    return r.json


async def test_a_device_gets_tokens_once_after_the_user_approves_its_code(srv):
    setup = await full_setup(srv, device=True)
    r = await device_authorization(srv, setup, scope="userinfo chat.read")
    assert r.status == 200, r.text
    assert r.headers["Cache-Control"] == "no-store"
    flow = r.json
    assert set(flow) == {"device_code", "user_code", "verification_uri", "verification_uri_complete",
                         "expires_in", "interval"}
    assert flow["device_code"].startswith("lba_dc_") and len(flow["device_code"]) == len("lba_dc_") + 43
    assert USER_CODE.fullmatch(flow["user_code"]), flow["user_code"]
    assert flow["verification_uri"] == f"{srv.url}/device"
    assert flow["verification_uri_complete"] == f"{srv.url}/device?user_code={flow['user_code']}"
    assert (flow["expires_in"], flow["interval"]) == (600, 5)

    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "authorization_pending")

    # A visitor is sent to sign in first, and comes back to the page, the code filled in.
    browser, page = await signed_in_at_device_page(srv, setup, urlsplit(flow["verification_uri_complete"]).path
                                                   + "?" + urlsplit(flow["verification_uri_complete"]).query)
    assert code_form(page).inputs and flow["user_code"] in page.response.text
    # Typed in lower case without the dash: the same code.
    consent = await enter_code(browser, page, flow["user_code"].replace("-", "").lower())
    assert consent.status == 200 and consent.consent_form() is not None, consent.text[:300]
    assert WARNING in consent.text and flow["user_code"] in consent.text and "Test App" in consent.text
    assert consent.consent_form().action == "/device"
    done = await browser.decide(consent, "approve")
    assert done.status == 200 and "You can return to your device" in done.text, done.text[:300]

    srv.clock.advance(5)
    r = await poll(srv, setup, flow["device_code"])
    assert r.status == 200, r.text
    assert r.headers["Cache-Control"] == "no-store"
    tokens = r.json
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 7200
    assert tokens["access_token"].startswith("lba_at_") and tokens["refresh_token"].startswith("lba_rt_")
    assert set(tokens["scope"].split()) == {"userinfo", "chat.read"}
    await assert_works_at_me(srv, tokens["access_token"])

    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "invalid_grant")  # single use

    refreshed = await srv.client.post("/oauth/token", form={"grant_type": "refresh_token",
                                                            "refresh_token": tokens["refresh_token"]},
                                      headers=client_auth(setup)["headers"])
    assert refreshed.status == 200, refreshed.text


async def test_polling_faster_than_the_interval_is_slow_down_and_the_interval_grows(srv):
    setup = await full_setup(srv, device=True)
    flow = await started(srv, setup)
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "authorization_pending")
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "slow_down")  # at once: interval 5 -> 10
    srv.clock.advance(6)
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "slow_down")  # 6 < 10: -> 15
    srv.clock.advance(14)
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "slow_down")  # 14 < 15: -> 20
    srv.clock.advance(20)
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "authorization_pending")
    rows = await srv.db.read(lambda conn: conn.execute(select(device_codes.c.interval)).all())
    assert rows == [(20,)]
    srv.clock.advance(20)
    await answer(srv, setup, flow["user_code"], "approve")
    assert (await poll(srv, setup, flow["device_code"])).status == 200


async def test_a_denied_request_is_access_denied(srv):
    setup = await full_setup(srv, device=True)
    flow = await started(srv, setup)
    done = await answer(srv, setup, flow["user_code"], "deny")
    assert "was not given access" in done.text
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "access_denied")
    srv.clock.advance(5)
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "access_denied")
    await assert_code_refused(srv, setup, flow["user_code"])  # answered: it cannot be entered again


async def test_a_device_code_expires_after_600_seconds(srv):
    setup = await full_setup(srv, device=True)
    flow = await started(srv, setup)
    srv.clock.advance(599)
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "authorization_pending")
    srv.clock.advance(1)
    assert_rfc_error(await poll(srv, setup, flow["device_code"]), "expired_token")
    await assert_code_refused(srv, setup, flow["user_code"])


async def test_a_device_code_works_only_for_its_own_client(srv):
    setup = await full_setup(srv, device=True)
    other = Setup(user=setup.user, token=setup.token,
                  app=await srv.create_app(setup.user["email"], name="Other Device App", device=True))
    flow = await started(srv, setup)
    await answer(srv, setup, flow["user_code"], "approve")
    assert_rfc_error(await poll(srv, other, flow["device_code"]), "invalid_grant")
    assert_rfc_error(await poll(srv, other, "lba_dc_not-a-code"), "invalid_grant")
    assert_rfc_error(await poll(srv, other, "no-prefix"), "invalid_grant")
    wrong_secret = Setup(user=setup.user, token=setup.token, app={**setup.app, "clientSecret": "lba_cs_wrong"})
    assert_rfc_error(await poll(srv, wrong_secret, flow["device_code"]), "invalid_client", 401)
    assert (await poll(srv, setup, flow["device_code"])).status == 200  # nothing above used it


async def test_an_app_not_registered_for_the_grant_is_unauthorized_client(srv):
    setup = await full_setup(srv)
    assert_rfc_error(await device_authorization(srv, setup), "unauthorized_client")
    assert_rfc_error(await poll(srv, setup, "lba_dc_whatever"), "unauthorized_client")


async def test_the_endpoint_answers_rfc_errors(srv):
    device = await full_setup(srv, device=True)
    bare = await srv.client.post("/oauth/device_authorization", headers=client_auth(device)["headers"])
    assert bare.status == 200 and bare.json["interval"] == 5, bare.text  # no body at all: the default scopes
    assert_rfc_error(await device_authorization(srv, device, scope="no-such-scope"), "invalid_scope")
    assert_rfc_error(await device_authorization(srv, device, resource="https://unknown.example/"), "invalid_target")
    assert_rfc_error(await poll(srv, device, ""), "invalid_request")
    wrong = Setup(user=device.user, token=device.token, app={**device.app, "clientSecret": "lba_cs_wrong"})
    assert_rfc_error(await device_authorization(srv, wrong), "invalid_client", 401)


async def test_a_public_client_registered_for_the_grant_uses_it(tmp_path, database_url):
    server = await start_server(tmp_path, database_url, registration="open")
    try:
        r = await server.client.post("/oauth/register", json={
            "client_name": "Terminal", "redirect_uris": ["http://127.0.0.1/callback"],
            "token_endpoint_auth_method": "none", "grant_types": ["authorization_code", "refresh_token", DEVICE_GRANT]})
        assert r.status == 201 and DEVICE_GRANT in r.json["grant_types"], r.text
        user = await server.create_user()
        setup = Setup(user=user, token="", app={"clientId": r.json["client_id"], "clientSecret": None})
        tokens = await tokens_by_device(server, setup, scope="userinfo")
        await assert_works_at_me(server, tokens["access_token"])
        rotated = await server.client.post("/oauth/token", form={
            "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"], "client_id": setup.client_id})
        assert rotated.status == 200 and rotated.json["refresh_token"] != tokens["refresh_token"], rotated.text
    finally:
        server.client.close()
        await server.running.stop()


async def test_wrong_codes_are_limited_per_session_and_per_address(tmp_path, database_url):
    server = await start_server(tmp_path, database_url, rate_limits="on")
    try:
        setup = await full_setup(server, device=True)
        flow = await started(server, setup)
        browser, page = await signed_in_at_device_page(server, setup)
        for wrong in ("BCDF-GHJK", "bcdfghjx", "not a code", "", "ZZZZ-ZZZZ"):
            page = await enter_code(browser, page, wrong)
            assert page.status == 400 and "not valid" in page.text and page.consent_form() is None, page.text[:300]
        refused = await enter_code(browser, page, flow["user_code"])  # the sixth try, right or wrong
        assert refused.status == 429 and refused.response.headers["Retry-After"], refused.text[:300]

        # Another session from this address is refused too; from another address it may try.
        second, elsewhere = await signed_in_at_device_page(server, setup)
        assert (await enter_code(second, elsewhere, "BCDF-GHJK")).status == 429
        other = from_address(PageSession(server), "127.0.0.2")
        page = await other.open_logged_in("/device", setup.user["email"], setup.user["password"])
        for _ in range(5):
            page = await enter_code(other, page, "BCDF-GHJK")
            assert page.status == 400
        # That session has used its tries, whatever address it comes from next.
        moved = from_address(other, "127.0.0.3")
        assert (await enter_code(moved, page, flow["user_code"])).status == 429

        server.clock.advance(60)  # a new window
        consent = await enter_code(browser, await browser.get("/device"), flow["user_code"])
        assert consent.consent_form() is not None, consent.text[:300]
    finally:
        server.client.close()
        await server.running.stop()


class _FromAddress:
    """A client that sends every request from `source` (another caller on the loopback network)."""

    def __init__(self, client, source: str) -> None:
        self.client, self.source = client, source

    async def request(self, *args, **kwargs):
        return await self.client.request(*args, source=self.source, **kwargs)


def from_address(browser: PageSession, source: str) -> PageSession:
    browser.client = _FromAddress(browser.server.client, source)
    return browser


async def test_device_codes_and_user_codes_are_stored_hashed(srv):
    setup = await full_setup(srv, device=True)
    flows = [await started(srv, setup) for _ in range(2)]
    await answer(srv, setup, flows[0]["user_code"], "approve")
    assert (await poll(srv, setup, flows[0]["device_code"])).status == 200
    rows = await srv.db.read(lambda conn: conn.execute(select(device_codes)).all())
    assert len(rows) == 2
    stored = " ".join(str(value) for row in rows for value in row)
    for flow in flows:
        user_code = flow["user_code"]
        for secret in (flow["device_code"], user_code, user_code.replace("-", ""), user_code.lower()):
            assert secret not in stored
    hashes = {row.device_code_hash for row in rows}
    assert hashes == {hashlib.sha256(flow["device_code"].encode()).hexdigest() for flow in flows}


async def test_revoking_the_app_revokes_the_device_grant_and_queues_the_webhook(srv):
    setup = await full_setup(srv, device=True, webhook_url="https://app.example/hook")
    tokens = await tokens_by_device(srv, setup)
    approved = await started(srv, setup)  # approved, not yet polled for
    await answer(srv, setup, approved["user_code"], "approve")
    await assert_works_at_me(srv, tokens["access_token"])

    r = await revoke_app(srv, setup.token, setup.client_id)
    assert r.status == 200, r.text
    srv.clock.advance(1)
    await assert_revoked_at_me(srv, tokens["access_token"])
    refreshed = await srv.client.post("/oauth/token", form={"grant_type": "refresh_token",
                                                            "refresh_token": tokens["refresh_token"]},
                                      headers=client_auth(setup)["headers"])
    assert_rfc_error(refreshed, "invalid_grant")
    assert_rfc_error(await poll(srv, setup, approved["device_code"]), "access_denied")
    events = await srv.db.read(lambda conn: conn.execute(
        select(webhook_events.c.id, webhook_events.c.reason, webhook_events.c.event_type)).all())
    assert events == [(r.data["eventId"], "user_revoked", "authorization.revoked")]


async def test_the_metadata_names_the_endpoint_and_the_grant(srv):
    meta = (await srv.client.get("/.well-known/oauth-authorization-server")).json
    assert meta["device_authorization_endpoint"] == f"{srv.url}/oauth/device_authorization"
    assert DEVICE_GRANT in meta["grant_types_supported"]


async def test_apps_create_device_and_apps_update_no_device(srv, database_url):
    owner = await srv.create_user()
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(srv.settings.data_dir)}
    created = await arun_cli("apps", "create", "--name", "TV App", "--owner", owner["email"], "--redirect-uri",
                             "https://tv.example/cb", "--device", "--json", env=env)
    assert created.returncode == 0, created.stderr
    app = json.loads(created.stdout)
    shown = await arun_cli("apps", "show", app["clientId"], "--json", env=env)
    assert DEVICE_GRANT in json.loads(shown.stdout)["grantTypes"], shown.stdout
    setup = Setup(user=owner, token="", app=app)
    assert (await device_authorization(srv, setup)).status == 200

    updated = await arun_cli("apps", "update", app["clientId"], "--no-device", "--json", env=env)
    assert updated.returncode == 0, updated.stderr
    assert json.loads(updated.stdout)["grantTypes"] == ["authorization_code", "refresh_token"]
    assert_rfc_error(await device_authorization(srv, setup), "unauthorized_client")

    again = await arun_cli("apps", "update", app["clientId"], "--device", "--json", env=env)
    assert DEVICE_GRANT in json.loads(again.stdout)["grantTypes"], again.stderr
    assert (await device_authorization(srv, setup)).status == 200


def device_checkbox(form) -> dict:
    (checkbox,) = [i for i in form.inputs if i.get("name") == "device"]
    assert checkbox.get("type") == "checkbox" and checkbox.get("aria-describedby") == "device-help"
    return checkbox


async def test_the_consoles_checkbox_allows_the_grant(srv):
    owner = await srv.create_user()
    browser = PageSession(srv)
    page = await browser.open_logged_in("/console/apps/new", owner["email"], owner["password"])
    form = next(f for f in page.forms if f.action == "/console/apps/new")
    assert "checked" not in device_checkbox(form)
    page = await browser.submit(page, form, {"name": "TV App", "redirect_uris": "https://tv.example/cb",
                                             "device": "on"})
    assert page.status == 200, page.text[:300]
    (app,) = [app_json(each) for each in await srv.services.apps.all_apps()]
    assert DEVICE_GRANT in app["grantTypes"]
    page = await browser.get(f"/console/apps/{app['clientId']}")
    save = next(f for f in page.forms if f.hidden().get("action") == "save")
    assert "checked" in device_checkbox(save)
    await browser.submit(page, save, {"name": "TV App", "redirect_uris": "https://tv.example/cb", "webhook_url": ""})
    (app,) = [app_json(each) for each in await srv.services.apps.all_apps()]
    assert app["grantTypes"] == ["authorization_code", "refresh_token"]

"""The console (contract section 12), over HTTP as a browser sends it: an owner creates an app and
sees its secrets once, edits it, rotates secrets (the old one stops working at once), sends a test
webhook and sees the attempt, redelivers; nobody else can see or touch the app."""

from __future__ import annotations

import json

from tests.flow_helpers import PageSession, exchange, full_setup, tokens_for
from tests.test_webhook_delivery import receiver, srv  # noqa: F401 - the fixtures

CALLBACK = "https://app.example/callback"


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def _code(page, element_id: str) -> str:
    """The text of `<code id=...>` in the page's HTML."""
    return _between(page.response.text, f'<code id="{element_id}">', "</code>")


async def _signed_in(server, user) -> tuple[PageSession, object]:
    session = PageSession(server)
    page = await session.open_logged_in("/console/", user["email"], user["password"])
    assert page.status == 200 and "Your apps" in page.text, page.text[:300]
    return session, page


async def _create(session, webhook_url: str = ""):
    page = await session.get("/console/apps/new")
    form = next(f for f in page.forms if f.action == "/console/apps/new")
    return await session.submit(page, form, {"name": "Console App", "redirect_uris": CALLBACK, "scopes": "userinfo",
                                             "webhook_url": webhook_url})


async def test_an_owner_creates_an_app_and_its_secret_works_once_shown(srv, receiver):  # noqa: F811
    owner = await srv.create_user()
    session, _ = await _signed_in(srv, owner)
    page = await _create(session, receiver.url)
    assert page.status == 200, page.text[:500]
    client_id = _code(page, "client-id")
    secret = _code(page, "client-secret")
    assert secret.startswith("lba_") and _code(page, "webhook-secret").startswith("lba_")
    assert "script-src 'self'" in page.response.headers["Content-Security-Policy"]
    # The secret authenticates the app; the app page never shows it again.
    token = await srv.login(owner["email"], owner["password"])
    r = await srv.client.post("/api/oauth/authorize/external", bearer=token,
                              json={"clientId": client_id, "redirectUri": CALLBACK, "scope": ["userinfo"]})
    assert (await exchange(srv, r.data["code"], CALLBACK, client_id, secret)).status == 200
    again = await session.get(f"/console/apps/{client_id}")
    assert secret not in again.response.text and 'id="client-secret"' not in again.response.text
    assert client_id in (await session.get("/console/")).text


async def test_rotating_the_client_secret_retires_the_old_one_at_once(srv, receiver):  # noqa: F811
    owner = await srv.create_user()
    session, _ = await _signed_in(srv, owner)
    page = await _create(session)
    client_id = _code(page, "client-id")
    old = _code(page, "client-secret")
    rotate = next(f for f in page.forms if f.hidden().get("action") == "rotate-secret")
    page = await session.submit(page, rotate)
    new = _code(page, "client-secret")
    assert new != old
    (await exchange(srv, "lba_ac_x", CALLBACK, client_id, old)).assert_error(401, "oauth2.client.secret_mismatch")
    (await exchange(srv, "lba_ac_x", CALLBACK, client_id, new)).assert_error(400, "oauth2.code.invalid")


async def test_a_test_webhook_is_delivered_and_its_attempt_listed(srv, receiver):  # noqa: F811
    owner = await srv.create_user()
    session, _ = await _signed_in(srv, owner)
    page = await _create(session, receiver.url)
    client_id = _code(page, "client-id")
    send = next(f for f in page.forms if f.hidden().get("action") == "test-webhook")
    page = await session.follow(await session.submit(page, send))
    assert "Test webhook queued" in page.text
    await srv.running.deliverer.flush()
    hooks = receiver.at("/hook")
    assert len(hooks) == 1 and json.loads(hooks[0].body)["reason"] == "test_delivery"
    page = await session.get(f"/console/apps/{client_id}")
    row = _between(page.response.text, '<table id="deliveries">', "</table>")
    assert "test_delivery" in row and "<td>200</td>" in row
    redeliver = next(f for f in page.forms if f.hidden().get("action") == "redeliver")
    page = await session.follow(await session.submit(page, redeliver))
    assert "queued again" in page.text
    await srv.running.deliverer.flush()
    assert len(receiver.at("/hook")) == 2


async def test_nobody_else_sees_or_changes_the_app(srv, receiver):  # noqa: F811
    owner, stranger = await srv.create_user(), await srv.create_user()
    session, _ = await _signed_in(srv, owner)
    client_id = _code(await _create(session), "client-id")
    other, _ = await _signed_in(srv, stranger)
    assert (await other.get(f"/console/apps/{client_id}")).status == 404
    assert client_id not in (await other.get("/console/")).text
    own_page = await other.get("/console/")
    forged = await other.request("POST", f"/console/apps/{client_id}",
                                 form={**own_page.forms[0].hidden(), "action": "rotate-secret"})
    assert forged.status == 404
    anonymous = await PageSession(srv).get(f"/console/apps/{client_id}")
    assert anonymous.login_form() is not None and client_id not in anonymous.text



async def test_an_owner_cannot_redeliver_another_apps_event(srv, receiver):  # noqa: F811
    owner, stranger = await srv.create_user(), await srv.create_user()
    session, _ = await _signed_in(srv, owner)
    page = await _create(session, receiver.url)
    send = next(f for f in page.forms if f.hidden().get("action") == "test-webhook")
    await session.follow(await session.submit(page, send))
    await srv.running.deliverer.flush()
    page = await session.get(f"/console/apps/{_code(page, 'client-id')}")
    event_id = next(f for f in page.forms if f.hidden().get("action") == "redeliver").hidden()["event_id"]

    other, _ = await _signed_in(srv, stranger)
    own_page = await _create(other)
    redeliver = {**own_page.forms[0].hidden(), "action": "redeliver", "event_id": event_id}
    forged = await other.request("POST", f"/console/apps/{_code(own_page, 'client-id')}", form=redeliver)
    assert forged.status == 404
    await srv.running.deliverer.flush()
    assert len(receiver.at("/hook")) == 1


async def test_settings_are_edited_and_bad_values_explained(srv, receiver):  # noqa: F811
    owner = await srv.create_user()
    session, _ = await _signed_in(srv, owner)
    page = await _create(session)
    save = next(f for f in page.forms if f.hidden().get("action") == "save")
    page = await session.follow(await session.submit(page, save, {
        "name": "Renamed", "redirect_uris": CALLBACK + "\nhttps://app.example/other", "scopes": "userinfo",
        "webhook_url": ""}))
    assert "Changes saved." in page.text and "Renamed" in page.text and "https://app.example/other" in page.text
    bad = await session.submit(page, save, {"name": "Renamed", "redirect_uris": "not a url", "webhook_url": ""})
    assert bad.status == 400 and 'role="alert"' in bad.response.text
    setup = await full_setup(srv)
    await tokens_for(srv, setup)  # the rest of the server is untouched

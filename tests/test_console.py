"""The console (contract section 12), over HTTP as a browser sends it: an owner creates an app and
sees its secrets once, edits it, rotates secrets (the old one stops working at once), sends a test
webhook and sees the attempt, redelivers; nobody else can see or touch the app."""

from __future__ import annotations

import json

from tests.flow_helpers import PageSession, exchange, full_setup, tokens_for
from tests.test_webhook_delivery import srv  # noqa: F401 - the fixture

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


async def test_openid_settings_choose_the_id_token_algorithm_and_post_logout_uris(srv, receiver):  # noqa: F811
    """Contract 15: the console sets the ID-token algorithm (its key made at once) and the
    post-logout redirect URIs (one per line) that RP-initiated logout may go back to."""
    import jwt

    from tests.flow_helpers import code_for

    owner = await srv.create_user()
    session, _ = await _signed_in(srv, owner)
    page = await session.get("/console/apps/new")
    assert '<select id="id_token_alg" name="id_token_alg"' in page.response.text
    assert all(f'<option value="{alg}"' in page.response.text for alg in ("RS256", "ES256", "EdDSA"))
    assert "EdDSA" not in srv.services.keyring.signers
    form = next(f for f in page.forms if f.action == "/console/apps/new")
    page = await session.submit(page, form, {
        "name": "OpenID App", "redirect_uris": CALLBACK, "webhook_url": "", "id_token_alg": "EdDSA",
        "post_logout_redirect_uris": "https://app.example/bye\n\n  https://app.example/later  \n"})
    assert page.status == 200, page.text[:500]
    client_id, secret = _code(page, "client-id"), _code(page, "client-secret")
    assert '<option value="EdDSA" selected' in page.response.text
    assert "https://app.example/bye\nhttps://app.example/later</textarea>" in page.response.text
    assert "EdDSA" in srv.services.keyring.signers  # made, and this process reloaded at once
    shown = (await session.get(f"/console/apps/{client_id}")).response.text
    assert '<option value="EdDSA" selected' in shown

    # The app's ID tokens are EdDSA, verified with the JWKS.
    token = await srv.login(owner["email"], owner["password"])
    setup_like = type("S", (), {"token": token, "client_id": client_id, "redirect_uri": CALLBACK})()
    code = await code_for(srv, setup_like, ("openid", "email"))
    tokens = (await exchange(srv, code, CALLBACK, client_id, secret)).data
    header = jwt.get_unverified_header(tokens["idToken"])
    assert header["alg"] == "EdDSA"
    jwks = (await srv.client.get("/.well-known/jwks.json")).json
    key = jwt.PyJWK.from_dict(next(k for k in jwks["keys"] if k["kid"] == header["kid"]))
    claims = jwt.decode(tokens["idToken"], key, algorithms=["EdDSA"], audience=client_id,
                        options={"verify_exp": False, "verify_iat": False})  # the server's clock is frozen
    assert claims["iss"] == srv.settings.issuer

    # RP-initiated logout goes back to a URI registered here, and only to one.
    logout = await PageSession(srv).get(f"/oauth/logout?client_id={client_id}"
                                        "&post_logout_redirect_uri=https://app.example/later&state=s")
    assert logout.status == 302 and logout.location == "https://app.example/later?state=s"

    # Edit: another algorithm, other URIs; bad values are explained and change nothing.
    page = await session.get(f"/console/apps/{client_id}")
    save = next(f for f in page.forms if f.hidden().get("action") == "save")
    page = await session.follow(await session.submit(page, save, {
        "name": "OpenID App", "redirect_uris": CALLBACK, "scopes": "openid", "webhook_url": "",
        "id_token_alg": "ES256", "post_logout_redirect_uris": "https://app.example/only"}))
    assert "Changes saved." in page.text and '<option value="ES256" selected' in page.response.text
    assert await srv.services.db.read(_app_row, client_id) == {"alg": "ES256", "uris": ["https://app.example/only"]}
    logout = await PageSession(srv).get(f"/oauth/logout?client_id={client_id}"
                                        "&post_logout_redirect_uri=https://app.example/later")
    assert logout.status == 200 and logout.location is None  # no longer registered
    for fields, needle in (({"id_token_alg": "HS256"}, "algorithm"),
                           ({"id_token_alg": "RS256", "post_logout_redirect_uris": "https://app.example/x#f"},
                            "fragment")):
        bad = await session.submit(page, save, {"name": "OpenID App", "redirect_uris": CALLBACK, "webhook_url": "",
                                                **fields})
        assert bad.status == 400 and needle in bad.text.lower(), bad.text[:500]
    assert await srv.services.db.read(_app_row, client_id) == {"alg": "ES256", "uris": ["https://app.example/only"]}
    assert "HS256" not in srv.services.keyring.signers


def _app_row(conn, client_id: str) -> dict:
    from lbauth.storage.repo import apps as apps_repo
    app = apps_repo.by_client_id(conn, client_id)
    return {"alg": app.id_token_alg, "uris": list(app.post_logout_redirect_uris)}

"""Pushed authorization requests (RFC 9126): a client pushes its request to /oauth/par, the browser
brings only the `request_uri` to /oauth/, and the pushed parameters are the request's, once."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from lbauth.storage.models import pushed_requests
from tests.conftest import arun_cli, start_server
from tests.flow_helpers import PageSession, Setup, full_setup, oauth_url, redirect_query
from tests.support import basic_auth

URN = "urn:ietf:params:oauth:request_uri:"


@pytest.fixture
def srv(server):
    """lbauth on a loopback port (tests/conftest.py's `server`)."""
    return server


async def push(server, setup: Setup, secret: str | None = None, **params):
    form = {"response_type": "code", "redirect_uri": setup.redirect_uri, "scope": "userinfo",
            "state": "pushed-state", **params}
    return await server.client.post("/oauth/par", form=form, headers={
        "Authorization": basic_auth(setup.client_id, secret or setup.client_secret)})


def assert_rfc_error(response, status: int, error: str) -> None:
    assert response.status == status, response.text
    assert response.json["error"] == error and response.json["error_description"], response.text
    assert "Location" not in response.headers


async def pushed_uri(server, setup: Setup, **params) -> str:
    r = await push(server, setup, **params)
    assert r.status == 201, r.text
    return r.json["request_uri"]


async def test_a_pushed_request_is_the_request_and_gives_a_code_once(srv):
    setup = await full_setup(srv)
    r = await push(srv, setup, scope="userinfo profile")
    assert r.status == 201, r.text
    assert set(r.json) == {"request_uri", "expires_in"} and r.json["expires_in"] == 60
    assert r.json["request_uri"].startswith(URN) and r.headers["Cache-Control"] == "no-store"
    request_uri = r.json["request_uri"]

    # What else the query says is not the request (RFC 9126 4): the pushed scope and state count.
    browser = PageSession(srv)
    page = await browser.open_logged_in(oauth_url({"client_id": setup.client_id, "request_uri": request_uri,
                                                   "scope": "chat", "state": "not-pushed"}),
                                        setup.user["email"], setup.user["password"])
    assert page.consent_form() is not None, page.text[:300]
    assert "chat" not in {f.hidden().get("scope") for f in page.forms}
    assert dict(page.consent_form().hidden()).get("request_uri") == request_uri
    done = await browser.decide(page, "approve")
    query = redirect_query(done.location, setup.redirect_uri)
    assert query["state"] == ["pushed-state"] and "code" in query

    exchanged = await srv.client.post("/oauth/token", form={
        "grant_type": "authorization_code", "code": query["code"][0], "redirect_uri": setup.redirect_uri},
        headers={"Authorization": basic_auth(setup.client_id, setup.client_secret)})
    assert exchanged.status == 200, exchanged.status
    assert set(exchanged.json["scope"].split()) == {"userinfo", "profile"}

    again = await browser.get(oauth_url({"client_id": setup.client_id, "request_uri": request_uri}))
    assert again.status == 400 and "Location" not in again.response.headers
    assert "expired or was already used" in again.text


async def test_an_unused_reference_ends_after_60_seconds_a_used_one_lasts_a_sign_in(srv):
    setup = await full_setup(srv)
    stale = await pushed_uri(srv, setup)
    srv.clock.advance(61)
    browser = PageSession(srv)
    page = await browser.get(oauth_url({"client_id": setup.client_id, "request_uri": stale}))
    assert page.status == 400 and page.login_form() is None

    fresh = await pushed_uri(srv, setup)
    page = await browser.get(oauth_url({"client_id": setup.client_id, "request_uri": fresh}))
    assert page.login_form() is not None  # first use: the user now has time to sign in
    srv.clock.advance(300)
    page = await browser.log_in(page, setup.user["email"], setup.user["password"])
    assert page.consent_form() is not None, page.text[:300]


async def test_a_reference_works_only_for_the_client_that_pushed_it(srv):
    setup = await full_setup(srv)
    other = await srv.create_app(setup.user["email"], redirect_uris=[setup.redirect_uri])
    request_uri = await pushed_uri(srv, setup)
    browser = PageSession(srv)
    for client_id, uri in ((other["clientId"], request_uri), (setup.client_id, URN + "lba_ru_unknown"),
                           ("cid_nobody", request_uri)):
        page = await browser.get(oauth_url({"client_id": client_id, "request_uri": uri}))
        assert page.status in (400, 404) and "Location" not in page.response.headers, page.text[:200]
    # Another request_uri is still a request object by reference, which lbauth does not take.
    page = await browser.get(oauth_url({"client_id": setup.client_id, "redirect_uri": setup.redirect_uri,
                                        "response_type": "code", "state": "s", "scope": "openid",
                                        "request_uri": "https://client.example/request.jwt"}))
    assert redirect_query(page.location, setup.redirect_uri)["error"] == ["request_uri_not_supported"]


async def test_prompt_login_in_a_pushed_request_asks_for_one_sign_in(srv):
    setup = await full_setup(srv)
    browser = PageSession(srv)
    first = await browser.open_logged_in(oauth_url({"client_id": setup.client_id,
                                                    "request_uri": await pushed_uri(srv, setup)}),
                                         setup.user["email"], setup.user["password"])
    await browser.decide(first, "approve")
    request_uri = await pushed_uri(srv, setup, prompt="login", scope="openid userinfo", nonce="n-1")
    page = await browser.get(oauth_url({"client_id": setup.client_id, "request_uri": request_uri}))
    assert page.login_form() is not None  # signed in, but prompt=login asks again
    page = await browser.log_in(page, setup.user["email"], setup.user["password"])
    assert page.login_form() is None and page.consent_form() is not None, page.text[:300]


async def test_deny_spends_the_pushed_request(srv):
    setup = await full_setup(srv)
    request_uri = await pushed_uri(srv, setup)
    browser = PageSession(srv)
    url = oauth_url({"client_id": setup.client_id, "request_uri": request_uri})
    page = await browser.open_logged_in(url, setup.user["email"], setup.user["password"])
    denied = await browser.decide(page, "deny")
    assert redirect_query(denied.location, setup.redirect_uri)["error"] == ["access_denied"]
    assert (await browser.get(url)).status == 400


async def test_the_endpoint_answers_rfc_errors_and_never_redirects(srv):
    setup = await full_setup(srv)
    assert_rfc_error(await push(srv, setup, secret="lba_cs_wrong"), 401, "invalid_client")
    assert_rfc_error(await push(srv, setup, redirect_uri="https://evil.example/cb"), 400, "invalid_request")
    assert_rfc_error(await push(srv, setup, request_uri=URN + "lba_ru_x"), 400, "invalid_request")
    assert_rfc_error(await push(srv, setup, client_id="cid_someone_else"), 401, "invalid_client")
    assert_rfc_error(await push(srv, setup, response_type="token"), 400, "unsupported_response_type")
    assert_rfc_error(await push(srv, setup, scope="no-such-scope"), 400, "invalid_scope")
    assert_rfc_error(await push(srv, setup, prompt="sometimes", scope="openid"), 400, "invalid_request")
    # The client's secret is never kept with the request (client_secret_post).
    r = await srv.client.post("/oauth/par", form={
        "client_id": setup.client_id, "client_secret": setup.client_secret, "response_type": "code",
        "redirect_uri": setup.redirect_uri, "state": "s"})
    assert r.status == 201, r.text
    rows = await srv.db.read(lambda conn: conn.execute(select(pushed_requests.c.parameters)).all())
    assert rows and all("client_secret" not in params for (params,) in rows)
    assert all(setup.client_secret not in str(params) for (params,) in rows)


async def test_an_app_that_requires_pushed_requests_refuses_plain_ones(srv, tmp_path, database_url):
    setup = await full_setup(srv)
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(srv.settings.data_dir)}
    updated = await arun_cli("apps", "update", setup.client_id, "--require-par", "--json", env=env)
    assert updated.returncode == 0, updated.stderr
    assert '"requirePushedAuthorizationRequests": true' in updated.stdout
    browser = PageSession(srv)
    await browser.open_logged_in(oauth_url({"client_id": setup.client_id,
                                            "request_uri": await pushed_uri(srv, setup)}),
                                 setup.user["email"], setup.user["password"])
    plain = await browser.get(oauth_url({"client_id": setup.client_id, "redirect_uri": setup.redirect_uri,
                                         "response_type": "code", "state": "plain", "scope": "userinfo"}))
    query = redirect_query(plain.location, setup.redirect_uri)
    assert query["error"] == ["invalid_request"] and query["state"] == ["plain"]
    pushed = await browser.get(oauth_url({"client_id": setup.client_id, "request_uri": await pushed_uri(srv, setup)}))
    assert pushed.consent_form() is not None, pushed.text[:300]

    assert (await arun_cli("apps", "update", setup.client_id, "--no-require-par", env=env)).returncode == 0
    plain = await browser.get(oauth_url({"client_id": setup.client_id, "redirect_uri": setup.redirect_uri,
                                         "response_type": "code", "state": "plain", "scope": "userinfo"}))
    assert plain.consent_form() is not None, plain.text[:300]


async def test_discovery_names_the_endpoint(srv):
    meta = (await srv.client.get("/.well-known/oauth-authorization-server")).json
    assert meta["pushed_authorization_request_endpoint"] == f"{srv.url}/oauth/par"
    assert meta["require_pushed_authorization_requests"] is False


async def test_a_registered_client_may_require_pushed_requests(tmp_path, database_url):
    server = await start_server(tmp_path, database_url, registration="open")
    try:
        document = {"redirect_uris": ["https://app.example/cb"], "client_name": "Pusher",
                    "require_pushed_authorization_requests": True}
        r = await server.client.post("/oauth/register", json=document)
        assert r.status == 201 and r.json["require_pushed_authorization_requests"] is True, r.text
        bad = await server.client.post("/oauth/register", json={**document,
                                                                "require_pushed_authorization_requests": "yes"})
        assert bad.status == 400 and bad.json["error"] == "invalid_client_metadata", bad.text
    finally:
        server.client.close()
        await server.running.stop()

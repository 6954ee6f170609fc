"""CORS for browser clients (contract 11): single-page apps and the MCP Inspector call the metadata
document, the JWKS, /oauth/token, /oauth/revoke and the revocation feed from their own origin. Those
answer `Access-Control-Allow-Origin: *` (errors too), never allow credentials, and approve the
preflight naming Authorization, Content-Type, DPoP and MCP-Protocol-Version. The pages and the /api/
endpoints that take a user's token or cookie answer no CORS at all.

Checked over plain HTTP, then from a real Chromium on another origin (tests/test_browser.py tells how
Chromium is found and launched)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from urllib.parse import urlencode

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web

from tests.flow_helpers import REGISTERED_URI, code_for, front_params, full_setup, oauth_url, tokens_for
from tests.support import TIMEOUT_MS, basic_auth

ORIGIN = {"Origin": "https://spa.example"}
PREFLIGHT_HEADERS = {"Authorization", "Content-Type", "DPoP", "MCP-Protocol-Version"}  # DPoP: RFC 9449
CORS_ENDPOINTS = [  # (path, the method a browser client uses)
    ("/.well-known/oauth-authorization-server", "GET"),
    ("/.well-known/jwks.json", "GET"),
    ("/api/oauth/revocations", "GET"),
    ("/oauth/token", "POST"),
    ("/oauth/revoke", "POST"),
    ("/oauth/par", "POST"),  # RFC 9126, for a single-page app that pushes its requests
    ("/oauth/device_authorization", "POST"),  # RFC 8628, for a TV's web app
]


def cors_headers(response) -> dict[str, str]:
    return {name.lower(): value for name, value in response.headers.get_all()
            if name.lower().startswith("access-control-")}


def assert_open_to_any_origin(response) -> None:
    headers = cors_headers(response)
    assert headers.get("access-control-allow-origin") == "*", (response.status, headers)
    assert "access-control-allow-credentials" not in headers, headers


async def test_the_public_endpoints_answer_any_origin_errors_too(server):
    setup = await full_setup(server)
    issued = await tokens_for(server, setup)
    credentials = {"client_id": setup.client_id, "client_secret": setup.client_secret}
    client = server.client
    answers = {
        "metadata": await client.get("/.well-known/oauth-authorization-server", headers=ORIGIN),
        "jwks": await client.get("/.well-known/jwks.json", headers=ORIGIN),
        "feed": await client.get("/api/oauth/revocations", headers=ORIGIN),
        "token": await client.post("/oauth/token", headers=ORIGIN, form={
            "grant_type": "refresh_token", "refresh_token": issued["refreshToken"], **credentials}),
        "revoke": await client.post("/oauth/revoke", headers=ORIGIN, form={"token": "lba_rt_unknown", **credentials}),
    }
    assert {name: r.status for name, r in answers.items()} == dict.fromkeys(answers, 200)
    errors = {
        "feed, bad cursor": await client.get("/api/oauth/revocations?since=nonsense", headers=ORIGIN),
        "token, wrong secret": await client.post("/oauth/token", headers={**ORIGIN, "Authorization": basic_auth(
            setup.client_id, "lba_cs_wrong")}, form={"grant_type": "refresh_token", "refresh_token": "x"}),
        "token, GET": await client.get("/oauth/token", headers=ORIGIN),
        "revoke, no client": await client.post("/oauth/revoke", headers=ORIGIN, form={"token": "x"}),
        "metadata, another issuer path": await client.get("/.well-known/oauth-authorization-server/other",
                                                          headers=ORIGIN),
    }
    assert {name: r.status for name, r in errors.items()} == {
        "feed, bad cursor": 400, "token, wrong secret": 401, "token, GET": 405, "revoke, no client": 401,
        "metadata, another issuer path": 404}
    for response in [*answers.values(), *errors.values()]:
        assert_open_to_any_origin(response)


@pytest.mark.parametrize("path, method", CORS_ENDPOINTS)
async def test_the_preflight_names_the_headers_a_client_sends(server, path, method):
    r = await server.client.request("OPTIONS", path, headers={
        **ORIGIN, "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization,content-type,mcp-protocol-version"})
    assert r.status == 204, r.text
    assert_open_to_any_origin(r)
    headers = cors_headers(r)
    allowed = {h.strip() for h in headers["access-control-allow-headers"].split(",")}
    assert allowed == PREFLIGHT_HEADERS  # by name: a "*" would never cover Authorization
    assert method in {m.strip() for m in headers["access-control-allow-methods"].split(",")}
    assert int(headers["access-control-max-age"]) > 0


async def test_no_cors_where_a_user_token_or_cookie_is_taken(server):
    setup = await full_setup(server)
    issued = await tokens_for(server, setup)
    client, user = server.client, {"Authorization": f"Bearer {setup.token}"}
    answers = [
        await client.get("/api/auth/me", headers={**ORIGIN, "Authorization": f"Bearer {issued['accessToken']}"}),
        await client.get("/api/service/user/info", headers={**ORIGIN, "Authorization": "Bearer x"}),
        await client.get("/api/auth/authorizations", headers={**ORIGIN, **user}),
        await client.post("/api/auth/login", headers=ORIGIN, json={"email": "a@example.com", "password": "x"}),
        await client.post("/api/oauth/authorize/external", headers={**ORIGIN, **user}, json={}),
        await client.post("/oauth/introspect", headers=ORIGIN, form={"token": "x"}),
        await client.get("/login", headers=ORIGIN),
        await client.get(oauth_url(front_params(setup.client_id, REGISTERED_URI)), headers=ORIGIN),
        await client.get("/account/apps", headers=ORIGIN),
        await client.get("/console/", headers=ORIGIN),
        await client.get("/api/account/profile", headers={**ORIGIN, **user}),
        await client.get("/api/account/sessions", headers={**ORIGIN, **user}),
        await client.post("/api/account/password", headers={**ORIGIN, **user}, json={}),
        await client.get("/account/", headers=ORIGIN),
    ]
    preflights = [await client.request("OPTIONS", path, headers={
        **ORIGIN, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": "authorization"})
        for path, method in [("/api/auth/me", "GET"), ("/api/auth/authorizations", "GET"),
                             (f"/api/auth/authorizations/{setup.client_id}", "DELETE"), ("/api/auth/login", "POST"),
                             ("/oauth/introspect", "POST"), ("/login", "POST"), ("/oauth/", "POST"),
                             ("/api/account/profile", "PATCH"), ("/api/account/sessions/end-others", "POST"),
                             ("/api/account", "DELETE"), ("/api/account/password", "POST")]]
    assert answers[0].status == answers[2].status == answers[10].status == answers[11].status == 200
    for response in answers + preflights:
        assert cors_headers(response) == {}, (response.status, dict(response.headers))
    assert all(r.status >= 400 for r in preflights)  # no preflight is approved there


# ---- a real browser on another origin ------------------------------------------------------------------

SPA_PAGE = "<!doctype html><title>spa</title><p>A single-page app on its own origin.</p>"

# What a browser OAuth client does: discovery, keys, a code exchange with client_secret_basic (Authorization
# makes it a preflighted request), a refused one, a revocation, the feed; then what it must not read.
CLIENT_SCRIPT = """async ([server, auth, wrongAuth, exchange]) => {
  const form = {'Content-Type': 'application/x-www-form-urlencoded', 'MCP-Protocol-Version': '2025-06-18'};
  const meta = await (await fetch(server + '/.well-known/oauth-authorization-server')).json();
  const jwks = await (await fetch(meta.jwks_uri)).json();
  const ok = await fetch(meta.token_endpoint, {method: 'POST', headers: {...form, Authorization: auth},
                                             body: exchange});
  const tokens = await ok.json();
  const refused = await fetch(meta.token_endpoint, {method: 'POST', headers: {...form, Authorization: wrongAuth},
                                                  body: 'grant_type=refresh_token&refresh_token=x'});
  const refusal = await refused.json();
  const revoke = await fetch(meta.revocation_endpoint, {method: 'POST', headers: {...form, Authorization: auth},
                                                      body: 'token=' + encodeURIComponent(tokens.refresh_token)});
  const revoked = await revoke.json();
  const feed = await (await fetch(meta.revocation_feed_endpoint)).json();
  let me;
  try {
    await fetch(server + '/api/auth/me', {headers: {Authorization: 'Bearer ' + tokens.access_token}});
    me = 'read';
  } catch (error) {
    me = error.name;
  }
  return {origin: location.origin, issuer: meta.issuer, keys: jwks.keys.length, status: ok.status,
          tokenType: tokens.token_type, refreshed: tokens.refresh_token.startsWith('lba_rt_'),
          refusedStatus: refused.status, refusal: refusal.error, revokeStatus: revoke.status, revoked,
          feedItems: feed.data.items.length, me};
}"""


class SpaPage(tornado.web.RequestHandler):
    def get(self) -> None:
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(SPA_PAGE)


@pytest.fixture
async def spa_origin() -> AsyncIterator[str]:
    """A second loopback origin that serves the single-page app."""
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    http = tornado.httpserver.HTTPServer(tornado.web.Application([(r"/", SpaPage)]))
    http.add_sockets(sockets)
    yield f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
    http.stop()
    await http.close_all_connections()


class AccessLog(logging.Handler):
    """The server's access-log lines: (method, path, status)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[str, str, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "fields", {})
        if "method" in fields:
            self.lines.append((fields["method"], fields["path"], fields["status"]))


async def test_chromium_on_another_origin_exchanges_a_code_with_basic_auth(server, spa_origin, browser):
    setup = await full_setup(server)
    code = await code_for(server, setup)
    exchange = urlencode({"grant_type": "authorization_code", "code": code, "redirect_uri": setup.redirect_uri,
                          "client_id": setup.client_id})  # the MCP SDKs send client_id beside Basic
    access_log = AccessLog()
    logging.getLogger("lbauth.access").addHandler(access_log)
    try:
        page = await browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        await page.goto(spa_origin + "/")
        result = await page.evaluate(CLIENT_SCRIPT, [
            server.url, basic_auth(setup.client_id, setup.client_secret),
            basic_auth(setup.client_id, "lba_cs_wrong"), exchange])
    finally:
        logging.getLogger("lbauth.access").removeHandler(access_log)
    assert result == {  # keys: the access-token key and the RS256 ID-token key (contract 8)
        "origin": spa_origin, "issuer": server.settings.issuer, "keys": 2, "status": 200, "tokenType": "Bearer",
        "refreshed": True, "refusedStatus": 401, "refusal": "invalid_client", "revokeStatus": 200, "revoked": {},
        "feedItems": 1, "me": "TypeError"}  # the user-token API stays closed to other origins
    # Chromium did ask first: the Authorization header makes these preflighted requests.
    assert ("OPTIONS", "/oauth/token", 204) in access_log.lines
    assert ("OPTIONS", "/oauth/revoke", 204) in access_log.lines
    assert ("OPTIONS", "/api/auth/me", 405) in access_log.lines
    assert ("GET", "/api/auth/me", 200) not in access_log.lines

"""RFC 9700 (OAuth 2.0 Security Best Current Practice) recommendations that docs/security.md maps
to these tests: no open redirect after login, `state` required on the page (unless PKCE), the
departure of error redirects before sign-in, bearer tokens never read from a URL, credentials
stored only as digests, refresh scopes that narrow but never widen, forwarded headers ignored, no
CORS, no PKCE downgrade."""

from __future__ import annotations

import hashlib
from urllib.parse import quote, urlencode, urlsplit

from tests.conftest import start_server
from tests.flow_helpers import (
    REGISTERED_URI,
    PageSession,
    code_for,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    pkce_pair,
    redirect_query,
    tokens_for,
)
from tests.support import unverified_claims
from tests.test_secrets_at_rest import _all_cells

EVIL_NEXT = (
    "https://evil.example/steal",
    "//evil.example/steal",
    "/\\evil.example/steal",
    "\\\\evil.example/steal",
    "/\t/evil.example/steal",  # browsers drop tabs: this would become //evil.example
    "javascript:alert(1)",
    "https:evil.example",
    "evil.example",
)


def _landing(location: str, server) -> str:
    """Where a redirect leads, checked to stay on the server: its path and query."""
    parts = urlsplit(location)
    assert parts.scheme in ("", "http") and parts.netloc in ("", urlsplit(server.url).netloc), location
    assert location.startswith(("/", server.url + "/")) and not location.startswith("//"), location
    return parts.path + (f"?{parts.query}" if parts.query else "")


async def test_login_goes_on_only_to_a_path_on_this_server(server):
    """§4.11: the login form's `next` is no open redirector."""
    user = await server.create_user()
    for target in EVIL_NEXT + ("/console/",):
        session = PageSession(server)
        page = await session.get("/login?next=" + quote(target, safe=""))
        assert page.status == 200 and page.login_form() is not None
        after = await session.submit(page, page.login_form(), {"email": user["email"], "password": user["password"]})
        assert after.status == 303, (target, after.status)
        expected = "/console/" if target == "/console/" else "/account/apps"
        assert _landing(after.location, server) == expected, (target, after.location)

        signed_in = await session.get("/login?next=" + quote(target, safe=""))  # already signed in
        assert _landing(signed_in.location, server) == expected, (target, signed_in.location)


async def test_state_is_required_on_the_authorization_page(server):
    """§4.7 (CSRF at the client): the page refuses a request without `state`, at the redirect URI."""
    user = await server.create_user()
    app = await server.create_app(user["email"], redirect_uris=[REGISTERED_URI])
    session = PageSession(server)
    params = front_params(app["clientId"], REGISTERED_URI)
    del params["state"]
    page = await session.open_logged_in(oauth_url(params), user["email"], user["password"])
    assert page.status in (302, 303), (page.status, page.text[:300])
    query = redirect_query(page.location, REGISTERED_URI)
    assert query["error"] == ["invalid_request"] and "code" not in query and "state" not in query


async def test_an_error_redirect_is_sent_before_the_user_signs_in(server):
    """The departure docs/security.md 3c.1 records (contract 5; §4.11.2 asks otherwise): a bad
    scope is reported at the registered redirect URI without a sign-in, and carries no code."""
    user = await server.create_user()
    app = await server.create_app(user["email"], redirect_uris=[REGISTERED_URI])
    page = await PageSession(server).get(oauth_url(front_params(app["clientId"], REGISTERED_URI,
                                                                scope="userinfo bogus", state="s-1")))
    query = redirect_query(page.location, REGISTERED_URI)
    assert query["error"] == ["invalid_scope"] and query["state"] == ["s-1"] and "code" not in query
    # An unregistered redirect URI is never redirected to, signed in or not.
    page = await PageSession(server).get(oauth_url(front_params(app["clientId"], "https://evil.example/cb",
                                                                scope="bogus")))
    assert page.status == 400 and page.location is None


async def test_an_access_token_is_read_only_from_the_authorization_header(server):
    """§4.3.2 / RFC 6750 2.3: a token in a URL leaks to logs and histories; it is not accepted."""
    setup = await full_setup(server)
    access = (await tokens_for(server, setup))["accessToken"]
    assert (await server.client.get("/api/auth/me", bearer=access)).status == 200
    r = await server.client.get("/api/auth/me?" + urlencode({"access_token": access}))
    r.assert_error(401, "oauth2.token.missing")
    r = await server.client.get("/api/service/user/info?" + urlencode({"access_token": access}))
    assert r.status == 401


async def test_codes_and_refresh_tokens_are_stored_only_as_digests(server):
    """§4.14 / contract: a database dump yields no code, refresh token or access token."""
    setup = await full_setup(server)
    code = await code_for(server, setup)
    stored_before = await _all_cells(server.db)
    assert hashlib.sha256(code.encode()).hexdigest() in stored_before
    issued = (await exchange(server, code, setup.redirect_uri, setup.client_id, setup.client_secret)).data
    cells = await _all_cells(server.db)
    blob = "\n".join(stored_before + cells)
    for credential in (code, issued["refreshToken"], issued["accessToken"]):
        prefix_free = credential.split("_", 2)[2]
        assert credential not in blob and prefix_free not in blob
    assert hashlib.sha256(issued["refreshToken"].encode()).hexdigest() in cells


async def test_a_refresh_narrows_scopes_but_never_widens_them(server):
    """§4.14.2 / RFC 6749 6: a refresh may ask for a subset of the grant, nothing beyond it."""
    setup = await full_setup(server)
    issued = await tokens_for(server, setup, scope=("userinfo", "chat.read"))
    form = {"grant_type": "refresh_token", "refresh_token": issued["refreshToken"],
            "client_id": setup.client_id, "client_secret": setup.client_secret}

    narrowed = await server.client.post("/oauth/token", form={**form, "scope": "userinfo"})
    assert narrowed.status == 200 and narrowed.json["scope"] == "userinfo"
    assert unverified_claims(narrowed.json["access_token"])["scope"] == "userinfo"

    for wider in ("userinfo note.write", "chat.read chat.write"):
        r = await server.client.post("/oauth/token", form={**form, "scope": wider})
        assert r.status == 400 and r.json["error"] == "invalid_scope", (wider, r.text)

    full = await server.client.post("/oauth/token", form=form)  # the token itself was not narrowed
    assert full.status == 200 and full.json["scope"] == "userinfo chat.read"


async def test_forwarded_headers_change_nothing(tmp_path, database_url):
    """§4.13 / §2.6: published URLs come from settings, and the per-address limits count the TCP
    peer, so no X-Forwarded-* header can move the issuer or dodge a limit."""
    server = await start_server(tmp_path, database_url, rate_limits="login-address=3/60")
    try:
        plain = (await server.client.get("/.well-known/oauth-authorization-server")).json
        forged = await server.client.get("/.well-known/oauth-authorization-server", headers={
            "X-Forwarded-Host": "evil.example", "X-Forwarded-Proto": "https", "Forwarded": "host=evil.example",
            "X-Real-Ip": "203.0.113.9"})
        assert forged.json == plain and "evil.example" not in forged.text

        statuses = []
        for i in range(4):
            r = await server.client.post("/api/auth/login", json={"email": f"nobody{i}@example.com", "password": "x"},
                                         headers={"X-Forwarded-For": f"198.51.100.{i}", "X-Real-Ip": f"198.51.100.{i}"})
            statuses.append(r.status)
        assert statuses == [401, 401, 401, 429]
    finally:
        server.client.close()
        await server.running.stop()


async def test_no_cors_headers_where_a_user_token_or_cookie_is_taken(server):
    """§2.6 / §4.11: no `Access-Control-*` header on the pages and on the /api/ endpoints that take a
    user's credentials, so no other origin's script reads an answer. The public endpoints that browser
    clients call (metadata, JWKS, token, revoke, feed) do answer CORS (contract 11): tests/test_cors.py."""
    setup = await full_setup(server)
    issued = await tokens_for(server, setup)
    origin = {"Origin": "https://evil.example"}
    answers = [
        await server.client.get("/api/auth/me", bearer=issued["accessToken"], headers=origin),
        await server.client.get(oauth_url(front_params(setup.client_id, setup.redirect_uri)), headers=origin),
        await server.client.request("OPTIONS", "/api/auth/me", headers={
            **origin, "Access-Control-Request-Method": "GET"}),
        await server.client.request("OPTIONS", "/oauth/introspect", headers={
            **origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization"}),
    ]
    assert answers[0].status == 200
    for r in answers:
        assert not [name for name in r.headers if name.lower().startswith("access-control-")], dict(r.headers)
    assert answers[2].status >= 400 and answers[3].status >= 400  # no preflight is approved there




async def test_no_pkce_downgrade_at_the_rfc_token_endpoint(server):
    """RFC 9700 2.1.1: a code_verifier for a code issued without a challenge is refused, and a code
    issued with one needs its verifier: both invalid_grant at /oauth/token (contract 5)."""
    s = await full_setup(server)
    verifier, challenge = pkce_pair()
    plain_code = await code_for(server, s)
    pkce_code = await code_for(server, s, codeChallenge=challenge, codeChallengeMethod="S256")

    async def token(code: str, **extra: str):
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": s.redirect_uri,
                "client_id": s.client_id, "client_secret": s.client_secret, **extra}
        return await server.client.post("/oauth/token", form=form)

    for code, extra in [(plain_code, {"code_verifier": verifier}), (pkce_code, {})]:
        r = await token(code, **extra)
        assert r.status == 400 and r.json["error"] == "invalid_grant", r.text
    assert (await token(plain_code)).status == 200  # refusals consume nothing
    assert (await token(pkce_code, code_verifier=verifier)).status == 200

"""Behaviour the specification and contract leave open, as lbauth decides it (docs/api.md)."""

from __future__ import annotations

from sqlalchemy import select

from lbauth.storage.models import grants
from tests.flow_helpers import (
    PageSession,
    authorize,
    code_for,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    pkce_pair,
    redirect_query,
    refresh,
    tokens_for,
)


async def test_a_scope_the_app_may_not_request_is_invalid_scope(server):
    s = await full_setup(server, allowed_scopes=["userinfo"])
    (await authorize(server, s.token, s.client_id, s.redirect_uri, ["chat.read"])
     ).assert_error(400, "oauth2.scope.invalid")
    browser = PageSession(server)
    page = await browser.open_logged_in(oauth_url(front_params(s.client_id, s.redirect_uri, scope="chat.read")),
                                        s.user["email"], s.user["password"])
    assert redirect_query(page.location, s.redirect_uri)["error"] == ["invalid_scope"]


async def test_without_scope_the_page_asks_for_every_scope_the_app_may_request(server):
    s = await full_setup(server, allowed_scopes=["userinfo", "voice"])
    browser = PageSession(server)
    consent = await browser.open_logged_in(oauth_url(front_params(s.client_id, s.redirect_uri, scope=None)),
                                           s.user["email"], s.user["password"])
    assert "text-to-speech" in consent.text
    code = redirect_query((await browser.decide(consent, "approve")).location, s.redirect_uri)["code"][0]
    data = (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)).data
    assert data["scope"] == ["userinfo", "voice"]


async def test_a_failed_exchange_does_not_use_up_the_code(server):
    s = await full_setup(server)
    verifier, challenge = pkce_pair()
    code = await code_for(server, s, codeChallenge=challenge, codeChallengeMethod="S256")
    (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret, code_verifier="x" * 43)
     ).assert_error(400, "oauth2.code_verifier.invalid")
    (await exchange(server, code, s.redirect_uri + "x", s.client_id, s.client_secret, code_verifier=verifier)
     ).assert_error(400, "oauth2.redirect_uri.mismatch")
    other = await server.create_app(s.user["email"], name="Other", redirect_uris=[s.redirect_uri])
    (await exchange(server, code, s.redirect_uri, other["clientId"], other["clientSecret"], code_verifier=verifier)
     ).assert_error(400, "oauth2.code.invalid")
    ok = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret, code_verifier=verifier)
    assert ok.status == 200


async def test_a_second_approval_extends_the_grant_to_the_union(server):
    s = await full_setup(server)
    await code_for(server, s, ["userinfo"])
    await code_for(server, s, ["chat.read", "voice"])
    rows = await server.db.read(lambda c: list(c.execute(select(grants.c.scopes, grants.c.revoked_at))))
    assert len(rows) == 1 and rows[0].revoked_at is None
    assert rows[0].scopes == ["userinfo", "chat.read", "voice"]
    # The code carries what was asked this time, not the whole grant.
    code = await code_for(server, s, ["voice"])
    data = (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)).data
    assert data["scope"] == ["voice"]


async def test_a_replayed_code_also_revokes_tokens_refreshed_from_it(server):
    """RFC 6749 4.1.2: everything the first redemption led to, refreshed access tokens included."""
    s = await full_setup(server)
    code = await code_for(server, s)
    first = (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)).data
    server.clock.advance(5)
    refreshed = (await refresh(server, first["refreshToken"], s.client_id, s.client_secret)).data
    assert (await server.client.get("/api/auth/me", bearer=refreshed["accessToken"])).status == 200
    server.clock.advance(5)
    (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)).assert_error(400, "oauth2.code.used")
    for token in (first["accessToken"], refreshed["accessToken"]):
        (await server.client.get("/api/auth/me", bearer=token)).assert_error(401, "oauth2.token.revoked")
    # The user's consent stands: a new authorization works at once.
    server.clock.advance(5)
    fresh = await tokens_for(server, s)
    assert (await server.client.get("/api/auth/me", bearer=fresh["accessToken"])).status == 200


async def test_a_form_without_its_xsrf_token_is_refused_with_a_clear_page(server):
    r = await server.client.post("/login", form={"email": "a@example.com", "password": "x"})
    assert r.status == 403 and "text/html" in r.headers["Content-Type"]
    assert "Reload the page" in r.text

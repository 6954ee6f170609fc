"""OpenID Connect as the contract words it (contract 15), checked from outside: ID tokens verified
independently with joserfc against /.well-known/jwks.json (every claim, at_hash recomputed), the
OpenID parameters of the authorization page (prompt, max_age, login_hint, id_token_hint, the ignored
and the refused ones), a relying party's form POST, and UserInfo's ways of taking a token.

These are also the modules of the OpenID Foundation's Basic OP test plan that apply here: see
docs/openid-connect.md for which test covers which module."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import KeySet

from tests.conftest import TestServer, start_server
from tests.flow_helpers import (
    Page,
    PageSession,
    Setup,
    authorize,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    redirect_query,
)

OPENID = "openid profile email"


# ---- helpers -------------------------------------------------------------------------------------------

def b64url_json(part: str) -> dict:
    return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))


async def verified(server: TestServer, id_token: str) -> tuple[dict, dict]:
    """(header, claims) of an ID token whose signature joserfc verified against the published JWKS."""
    jwks = (await server.client.get("/.well-known/jwks.json")).json
    header = b64url_json(id_token.split(".")[0])
    assert header.get("alg") not in (None, "none", "") and header.get("kid"), header
    assert header["kid"] in {k["kid"] for k in jwks["keys"]}
    token = jwt.decode(id_token, KeySet.import_key_set(jwks), algorithms=["RS256", "ES256"])
    assert token.header["alg"] == header["alg"]
    return token.header, token.claims


def at_hash(access_token: str) -> str:
    digest = hashlib.sha256(access_token.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest[:16]).rstrip(b"=").decode()


def params(setup: Setup, scope: str = OPENID, **extra: str) -> dict[str, str]:
    return front_params(setup.client_id, setup.redirect_uri, scope=scope, **extra)


async def first_approval(server: TestServer, setup: Setup, **extra: str) -> tuple[PageSession, dict]:
    """Sign in through the page and approve an OpenID request: the browser and the redirect's query."""
    browser = PageSession(server)
    page = await browser.open_logged_in(oauth_url(params(setup, **extra)), setup.user["email"], setup.user["password"])
    landing = await browser.decide(page, "approve")
    return browser, redirect_query(landing.location, setup.redirect_uri)


async def token_response(server: TestServer, setup: Setup, code: str) -> dict:
    r = await server.client.post("/oauth/token", form={
        "grant_type": "authorization_code", "code": code, "redirect_uri": setup.redirect_uri,
        "client_id": setup.client_id, "client_secret": setup.client_secret})
    assert r.status == 200, r.text
    return r.json


def refused_with(page: Page, setup: Setup, error: str, state: str = "st-front") -> dict:
    assert page.status in (302, 303), (page.status, page.text[:300])
    query = redirect_query(page.location, setup.redirect_uri)
    assert query["error"] == [error], query
    assert query["state"] == [state]
    return query


# ---- the ID token's claims (contract 15) ---------------------------------------------------------------

async def test_every_claim_of_the_page_flows_id_token(tmp_path: Path, database_url: str):
    server = await start_server(tmp_path, database_url, id_token_ttl=900)  # LBAUTH_ID_TOKEN_TTL
    try:
        setup = await full_setup(server)
        _, query = await first_approval(server, setup, nonce="n-0S6_WzA2Mj")
        assert query["iss"] == [server.settings.issuer]
        tokens = await token_response(server, setup, query["code"][0])
        header, claims = await verified(server, tokens["id_token"])
        assert header["alg"] == "RS256" and header["typ"] == "JWT"
        me = (await server.client.get("/api/auth/me", bearer=tokens["access_token"])).data
        now = int(server.clock.now())
        assert claims["iss"] == server.settings.issuer
        assert claims["sub"] == me["appScopedUserId"] != setup.user["userId"]
        assert claims["aud"] == setup.client_id
        assert claims["iat"] == now and claims["exp"] == now + 900
        assert claims["auth_time"] == now  # signed in on the page, just now (frozen clock)
        assert claims["nonce"] == "n-0S6_WzA2Mj"
        assert claims["at_hash"] == at_hash(tokens["access_token"])
        assert claims["amr"] == ["pwd"] and claims["acr"] == "urn:lbauth:acr:pwd"
        sessions = (await server.client.get("/api/account/sessions", bearer=setup.token)).data["items"]
        browser_session = next(s for s in sessions if s["sessionId"] == claims["sid"])
        assert browser_session["kind"] == "browser" and browser_session["current"] is False
        assert set(claims) == {"iss", "sub", "aud", "iat", "exp", "auth_time", "nonce", "at_hash", "sid", "amr", "acr"}

        # Pairwise: the same user at another app has another sub.
        other = Setup(user=setup.user, token=setup.token,
                      app=await server.create_app(setup.user["email"], name="Other App"))
        browser = PageSession(server)
        page = await browser.open_logged_in(oauth_url(params(other)), setup.user["email"], setup.user["password"])
        landing = redirect_query((await browser.decide(page, "approve")).location, other.redirect_uri)
        other_tokens = await token_response(server, other, landing["code"][0])
        _, other_claims = await verified(server, other_tokens["id_token"])
        assert other_claims["sub"] != claims["sub"] and "nonce" not in other_claims
        other_me = (await server.client.get("/api/auth/me", bearer=other_tokens["access_token"])).data
        assert other_claims["sub"] == other_me["appScopedUserId"]
    finally:
        server.client.close()
        await server.running.stop()


async def test_the_envelope_endpoints_id_token_names_the_user_tokens_session(server):
    setup = await full_setup(server)
    login_time = int(server.clock.now())
    server.clock.advance(30)
    r = await authorize(server, setup.token, setup.client_id, setup.redirect_uri, ["openid", "email"],
                        nonce="abc")
    assert r.status == 200, r.text
    data = (await exchange(server, r.data["code"], setup.redirect_uri, setup.client_id, setup.client_secret)).data
    header, claims = await verified(server, data["idToken"])
    current = next(s for s in (await server.client.get("/api/account/sessions", bearer=setup.token)).data["items"]
                   if s["current"])
    assert claims["sid"] == current["sessionId"] and current["kind"] == "api"
    assert claims["auth_time"] == login_time and claims["iat"] == login_time + 30
    assert claims["nonce"] == "abc" and claims["at_hash"] == at_hash(data["accessToken"])
    me = (await server.client.get("/api/auth/me", bearer=data["accessToken"])).data
    assert claims["sub"] == me["appScopedUserId"]


# ---- scopes --------------------------------------------------------------------------------------------

async def test_unknown_scope_values_are_ignored_in_an_openid_request_only(server):
    setup = await full_setup(server)
    _, query = await first_approval(server, setup, scope="openid offline_access email")
    tokens = await token_response(server, setup, query["code"][0])
    assert tokens["scope"] == "openid email" and tokens["id_token"]
    browser = PageSession(server)
    page = await browser.follow(await browser.get(oauth_url(params(setup, scope="userinfo offline_access"))))
    refused_with(page, setup, "invalid_scope")


async def test_scope_order_does_not_matter(server):
    setup = await full_setup(server)
    _, query = await first_approval(server, setup, scope="email openid")
    tokens = await token_response(server, setup, query["code"][0])
    assert set(tokens["scope"].split()) == {"openid", "email"} and tokens["id_token"]


async def test_a_missing_response_type_is_refused_and_no_code_is_issued(server):
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    request = {k: v for k, v in params(setup).items() if k != "response_type"}
    page = await browser.get(oauth_url(request))
    if page.status in (302, 303):
        refused_with(page, setup, "invalid_request")
    else:
        assert page.status == 400 and not page.location


async def test_discovery_never_offers_unsigned_id_tokens(server):
    meta = (await server.client.get("/.well-known/openid-configuration")).json
    assert meta["id_token_signing_alg_values_supported"] == ["RS256", "ES256", "EdDSA"]
    assert meta["request_parameter_supported"] is False and meta["request_uri_parameter_supported"] is False
    assert meta["claims_parameter_supported"] is False


# ---- prompt, max_age, hints ----------------------------------------------------------------------------

async def test_prompt_none_signed_out_is_login_required_with_iss_and_state(server):
    setup = await full_setup(server)
    page = await PageSession(server).get(oauth_url(params(setup, prompt="none")))
    query = refused_with(page, setup, "login_required")
    assert query["iss"] == [server.settings.issuer]


async def test_prompt_none_with_a_covering_grant_issues_a_code_without_any_page(server):
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    page = await browser.get(oauth_url(params(setup, prompt="none", nonce="again")))
    assert page.status == 302 and not page.forms
    query = redirect_query(page.location, setup.redirect_uri)
    _, claims = await verified(server, (await token_response(server, setup, query["code"][0]))["id_token"])
    assert claims["nonce"] == "again"


async def test_prompt_none_without_a_grant_is_consent_required(server):
    setup = await full_setup(server)
    browser = PageSession(server)
    page = await browser.open_logged_in(oauth_url(params(setup)), setup.user["email"], setup.user["password"])
    assert page.consent_form() is not None  # signed in now, no grant yet
    refused_with(await browser.get(oauth_url(params(setup, prompt="none"))), setup, "consent_required")
    # A grant for less than the request does not cover it either.
    await browser.decide(page, "approve")
    wider = await browser.get(oauth_url(params(setup, scope="openid profile email chat.read", prompt="none")))
    refused_with(wider, setup, "consent_required")


async def test_prompt_none_with_an_unregistered_localhost_redirect_is_consent_required(server):
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)  # the grant covers the scopes
    loopback = "http://127.0.0.1:5123/callback"
    page = await browser.get(oauth_url(front_params(setup.client_id, loopback, scope=OPENID, prompt="none")))
    assert page.status == 302, page.text[:300]
    query = redirect_query(page.location, loopback)
    assert query["error"] == ["consent_required"] and "code" not in query


async def test_prompt_none_with_another_value_is_invalid_request(server):
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    refused_with(await browser.get(oauth_url(params(setup, prompt="none login"))), setup, "invalid_request")


async def test_a_max_age_in_digits_other_than_ascii_is_invalid_request(server):
    """A superscript two is a digit to str.isdigit but no number to int(): it once answered 500."""
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    refused_with(await browser.get(oauth_url(params(setup, max_age="\u00b2"))), setup, "invalid_request")


async def test_prompt_login_signs_in_again_and_moves_auth_time(server):
    setup = await full_setup(server)
    browser, query = await first_approval(server, setup)
    first = (await verified(server, (await token_response(server, setup, query["code"][0]))["id_token"]))[1]
    server.clock.advance(120)
    page = await browser.get(oauth_url(params(setup, prompt="login")))
    assert page.status == 200 and page.login_form() is not None  # even though signed in
    landing = await browser.log_in(page, setup.user["email"], setup.user["password"])
    code = redirect_query(landing.location, setup.redirect_uri)["code"][0]
    second = (await verified(server, (await token_response(server, setup, code))["id_token"]))[1]
    assert second["auth_time"] == first["auth_time"] + 120 and second["sub"] == first["sub"]


@pytest.mark.parametrize("max_age", ["0", "1"])  # 1: Basic OP oidcc-max-age-1
async def test_max_age_signs_in_once_then_issues_a_code(server, max_age):
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    server.clock.advance(5)
    page = await browser.get(oauth_url(params(setup, max_age=max_age)))
    assert page.login_form() is not None
    landing = await browser.log_in(page, setup.user["email"], setup.user["password"])
    assert landing.status in (302, 303), landing.text[:300]  # not the sign-in form again
    code = redirect_query(landing.location, setup.redirect_uri)["code"][0]
    _, claims = await verified(server, (await token_response(server, setup, code))["id_token"])
    assert claims["auth_time"] == int(server.clock.now())


async def test_max_age_exceeded_with_prompt_none_is_login_required(server):
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    server.clock.advance(61)
    refused_with(await browser.get(oauth_url(params(setup, prompt="none", max_age="60"))), setup, "login_required")
    page = await browser.get(oauth_url(params(setup, prompt="none", max_age="3600")))
    assert "code" in redirect_query(page.location, setup.redirect_uri)


async def test_login_hint_fills_in_the_email(server):
    setup = await full_setup(server)
    page = await PageSession(server).get(oauth_url(params(setup, login_hint="someone@example.com")))
    form = page.login_form()
    assert form is not None
    assert next(i for i in form.inputs if i.get("name") == "email").get("value") == "someone@example.com"


async def test_id_token_hint_of_another_client_is_invalid_request(server):
    setup = await full_setup(server)
    browser, query = await first_approval(server, setup)
    id_token = (await token_response(server, setup, query["code"][0]))["id_token"]
    other = Setup(user=setup.user, token=setup.token, app=await server.create_app(setup.user["email"], name="B"))
    page = await browser.get(oauth_url(params(other, id_token_hint=id_token)))
    refused_with(page, other, "invalid_request")
    refused_with(await browser.get(oauth_url(params(setup, id_token_hint="not.a.jwt"))), setup, "invalid_request")
    # The app's own hint, for the signed-in user: a code, with prompt=none, the expired hint accepted.
    server.clock.advance(server.settings.id_token_ttl + 10)
    page = await browser.get(oauth_url(params(setup, id_token_hint=id_token, prompt="none")))
    assert "code" in redirect_query(page.location, setup.redirect_uri)


async def test_id_token_hint_naming_another_user_with_prompt_none_is_login_required(server):
    setup = await full_setup(server)
    _, query = await first_approval(server, setup)
    hint = (await token_response(server, setup, query["code"][0]))["id_token"]
    second_user = await server.create_user()
    second = Setup(user=second_user, token="", app=setup.app)
    browser, _ = await first_approval(server, second)  # the other user is signed in and has a grant
    page = await browser.get(oauth_url(params(setup, id_token_hint=hint, prompt="none")))
    refused_with(page, setup, "login_required")


@pytest.mark.parametrize(("name", "error"), [("request", "request_not_supported"),
                                             ("request_uri", "request_uri_not_supported")])
async def test_request_objects_are_refused(server, name, error):
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    value = "eyJhbGciOiJub25lIn0.eyJzY29wZSI6Im9wZW5pZCJ9." if name == "request" else "https://rp.example/r.jwt"
    refused_with(await browser.get(oauth_url(params(setup, **{name: value}))), setup, error)


@pytest.mark.parametrize("name", ["request", "request_uri"])
async def test_an_empty_request_object_parameter_counts_as_omitted(server, name):
    """RFC 6749 3.1: a parameter sent without a value is treated as if it were not sent."""
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    page = await browser.get(oauth_url(params(setup, **{name: ""})))
    assert "code" in redirect_query(page.location, setup.redirect_uri), page.location


async def test_display_locales_and_acr_values_are_accepted_and_ignored(server):
    setup = await full_setup(server)
    browser, _ = await first_approval(server, setup)
    page = await browser.get(oauth_url(params(setup, display="popup", ui_locales="fr-CA en", claims_locales="de",
                                              acr_values="urn:mace:incommon:iap:silver", unknown_param="x",
                                              claims='{"userinfo": {"name": {"essential": true}}}')))
    assert "code" in redirect_query(page.location, setup.redirect_uri)


async def test_a_relying_partys_form_post_needs_no_xsrf_token(server):
    setup = await full_setup(server)
    browser = PageSession(server)
    page = await browser.request("POST", "/oauth/", form=params(setup, nonce="posted"))
    assert page.status == 200 and page.login_form() is not None, page.text[:300]
    consent = await browser.log_in(page, setup.user["email"], setup.user["password"])
    landing = await browser.decide(consent, "approve")
    code = redirect_query(landing.location, setup.redirect_uri)["code"][0]
    _, claims = await verified(server, (await token_response(server, setup, code))["id_token"])
    assert claims["nonce"] == "posted"
    # Signed in and covered: the posted request answers with a code at once (303 after a POST).
    again = await browser.request("POST", "/oauth/", form=params(setup, prompt="none"))
    assert again.status == 303 and "code" in redirect_query(again.location, setup.redirect_uri)


# ---- UserInfo ------------------------------------------------------------------------------------------

async def test_userinfo_takes_the_token_in_the_header_or_the_post_body_never_the_query(server):
    setup = await full_setup(server)
    _, query = await first_approval(server, setup)
    tokens = await token_response(server, setup, query["code"][0])
    access, sub = tokens["access_token"], (await verified(server, tokens["id_token"]))[1]["sub"]
    expected = {"sub": sub, "name": setup.user["name"], "email": setup.user["email"], "email_verified": False}
    c = server.client
    answers: list[Any] = [await c.get("/oauth/userinfo", bearer=access),
                          await c.post("/oauth/userinfo", bearer=access, form={}),
                          await c.post("/oauth/userinfo", form={"access_token": access})]
    for r in answers:
        assert r.status == 200 and r.json == expected, r.text
        assert r.headers["Content-Type"].startswith("application/json")
    r = await c.get(f"/oauth/userinfo?access_token={access}")
    assert r.status == 400 and r.json["error"] == "invalid_request", r.text  # RFC 6750 2.3: never the query
    r = await c.get("/oauth/userinfo", bearer="lba_at_not-a-token")
    assert r.status == 401 and r.json["error"] == "invalid_token"
    assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    r = await c.get("/oauth/userinfo")
    assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")


async def test_userinfo_without_the_openid_scope_is_insufficient_scope(server):
    setup = await full_setup(server)
    r = await authorize(server, setup.token, setup.client_id, setup.redirect_uri, ["userinfo"])
    data = (await exchange(server, r.data["code"], setup.redirect_uri, setup.client_id, setup.client_secret)).data
    assert "idToken" not in data
    r = await server.client.get("/oauth/userinfo", bearer=data["accessToken"])
    assert r.status == 403 and r.json["error"] == "insufficient_scope"
    assert 'error="insufficient_scope"' in r.headers["WWW-Authenticate"]


# ---- code reuse (Basic OP: oidcc-codereuse, oidcc-codereuse-30seconds) ----------------------------------

async def test_a_reused_openid_code_is_refused_and_revokes_what_it_gave(server):
    setup = await full_setup(server)
    _, query = await first_approval(server, setup)
    code = query["code"][0]
    tokens = await token_response(server, setup, code)
    assert (await server.client.get("/oauth/userinfo", bearer=tokens["access_token"])).status == 200
    server.clock.advance(30)
    r = await server.client.post("/oauth/token", form={
        "grant_type": "authorization_code", "code": code, "redirect_uri": setup.redirect_uri,
        "client_id": setup.client_id, "client_secret": setup.client_secret})
    assert r.status == 400 and r.json["error"] == "invalid_grant" and "id_token" not in r.json
    r = await server.client.get("/oauth/userinfo", bearer=tokens["access_token"])
    assert r.status == 401 and r.json["error"] == "invalid_token"

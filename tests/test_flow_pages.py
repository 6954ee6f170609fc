"""The front channel: GET {auth_url}/oauth/ with its login form, consent page and redirects
(spec 4.1, contract 5), driven by a small cookie-keeping browser (tests/flow_helpers.PageSession).

Assumed page markup (not fixed by the contract): the login form is the form with a `password`
input (and an `email` input); the consent form is the form with submit buttons named `decision`,
valued `approve` and `deny`; both carry Tornado's `_xsrf` hidden input."""

from __future__ import annotations

import pytest

from tests.flow_helpers import (
    REGISTERED_URI,
    Page,
    PageSession,
    Setup,
    exchange,
    front_params,
    oauth_url,
    pkce_pair,
    redirect_query,
)

APP_NAME = "Moonbeam Notes"
USER_NAME = "Grace Hopper"
LOCALHOST_URI = "http://localhost:5173/cb"


async def page_setup(server) -> Setup:
    user = await server.create_user(name=USER_NAME)
    app = await server.create_app(user["email"], name=APP_NAME, redirect_uris=[REGISTERED_URI])
    return Setup(user=user, token="", app=app)


async def consent_page(server, s: Setup, session: PageSession | None = None,
                       **params: str) -> tuple[PageSession, Page]:
    """A session logged in through the page's login form, and the consent page it ends on."""
    session = session or PageSession(server)
    page = await session.open_logged_in(oauth_url(front_params(s.client_id, s.redirect_uri, **params)),
                                        s.user["email"], s.user["password"])
    assert page.status == 200, (page.status, page.location, page.text[:300])
    assert page.consent_form() is not None, page.text[:500]
    return session, page


def assert_redirect(page: Page, redirect_uri: str = REGISTERED_URI) -> dict[str, list[str]]:
    """A 302 or 303 (never 307) to `redirect_uri`; its query as name -> values."""
    assert page.status in (302, 303), (page.status, page.text[:300])
    assert page.location
    return redirect_query(page.location, redirect_uri)


def assert_error_redirect(page: Page, error: str, state: str | None) -> None:
    query = assert_redirect(page)
    assert query["error"] == [error], query
    assert len(query["error_description"]) == 1 and query["error_description"][0], query
    if state is not None:
        assert query["state"] == [state], query
    assert "code" not in query


def assert_error_page(page: Page) -> None:
    """An HTML error page with HTTP 400, never a redirect."""
    assert page.status == 400, (page.status, page.location)
    assert page.location is None
    assert page.response.headers.get("Content-Type", "").startswith("text/html")
    assert "code=" not in page.text


def assert_page_headers(page: Page) -> None:
    h = page.response.headers
    assert h.get("X-Frame-Options") == "DENY"
    assert "frame-ancestors 'none'" in h.get("Content-Security-Policy", "")
    assert h.get("Referrer-Policy") == "no-referrer"
    assert "no-store" in h.get("Cache-Control", "")


# ---- the happy path ------------------------------------------------------------------------------------

async def test_login_form_then_consent_then_approve_gives_an_exchangeable_code(server):
    s = await page_setup(server)
    state = "a b&c=d/é"
    session = PageSession(server)
    page = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI, state=state,
                                                    scope="userinfo chat.read")))
    assert page.status == 200
    login = page.login_form()
    assert login is not None and login.has_input("email") and login.has_input("password"), page.text[:500]

    page = await session.log_in(page, s.user["email"], s.user["password"])
    assert page.status == 200, (page.status, page.location)
    form = page.consent_form()
    assert form is not None, page.text[:500]
    assert "_xsrf" in form.hidden()
    assert APP_NAME in page.text
    assert s.user["email"] in page.text or USER_NAME in page.text
    # Each requested scope with its meaning (spec 2): userinfo is about name and email,
    # chat.read about message history.
    rest = page.text.replace(s.user["email"], " ").replace(USER_NAME, " ").lower()
    assert "name" in rest or "email" in rest, page.text
    assert "message" in rest, page.text

    result = await session.decide(page, "approve")
    query = assert_redirect(result)
    assert set(query) == {"code", "state"}, query
    assert query["state"] == [state]
    assert len(query["code"]) == 1 and query["code"][0].startswith("lba_ac_")

    r = await exchange(server, query["code"][0], REGISTERED_URI, s.client_id, s.client_secret)
    assert r.status == 200, r.text
    assert sorted(r.data["scope"]) == ["chat.read", "userinfo"]


async def test_deny_redirects_with_access_denied_and_the_state(server):
    s = await page_setup(server)
    state = "deny me & keep/this é"
    session, page = await consent_page(server, s, state=state)
    result = await session.decide(page, "deny")
    assert_error_redirect(result, "access_denied", state)


async def test_a_live_grant_covering_the_scopes_skips_the_consent(server):
    s = await page_setup(server)
    session, page = await consent_page(server, s, scope="userinfo chat.read")
    assert_redirect(await session.decide(page, "approve"))

    again = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI, state="second",
                                                     scope="chat.read")))
    query = assert_redirect(again)
    assert query["state"] == ["second"] and query["code"][0].startswith("lba_ac_")
    r = await exchange(server, query["code"][0], REGISTERED_URI, s.client_id, s.client_secret)
    assert r.status == 200, r.text
    assert r.data["scope"] == ["chat.read"]  # the scopes requested, not the whole grant

    wider = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI, state="third",
                                                     scope="userinfo voice")))
    assert wider.status == 200 and wider.consent_form() is not None  # a new scope: asked again


async def test_consent_page_says_when_the_redirect_goes_to_this_device(server):
    s = await page_setup(server)
    session, page = await consent_page(server, s)
    assert "device" not in page.text.lower()

    local = await session.get(oauth_url(front_params(s.client_id, LOCALHOST_URI, state="loc")))
    assert local.status == 200 and local.consent_form() is not None
    assert "device" in local.text.lower(), local.text
    query = assert_redirect(await session.decide(local, "approve"), LOCALHOST_URI)
    assert query["state"] == ["loc"] and query["code"][0].startswith("lba_ac_")


# ---- a bad client or redirect URI: an error page, never a redirect ---------------------------------------

async def test_unknown_client_id_is_an_error_page(server):
    s = await page_setup(server)
    url = oauth_url(front_params("cid_000000000000000000000000", REGISTERED_URI))
    assert_error_page(await PageSession(server).get(url))

    session, _ = await consent_page(server, s)
    assert_error_page(await session.get(url))


@pytest.mark.parametrize("redirect_uri", [
    "https://other.example/callback",
    "http://localhost.evil.example/cb",
    "http://localhost@evil.example/cb",
    "https://localhost:5173/cb",
    "http://LOCALHOST:5173/cb",
    REGISTERED_URI + "/",
])
async def test_unregistered_redirect_uri_is_an_error_page(server, redirect_uri):
    s = await page_setup(server)
    url = oauth_url(front_params(s.client_id, redirect_uri))
    assert_error_page(await PageSession(server).get(url))

    session, _ = await consent_page(server, s)
    assert_error_page(await session.get(url))


# ---- failures once the redirect URI is known good: a redirect with error -------------------------------

async def test_response_type_token_is_unsupported_response_type(server):
    s = await page_setup(server)
    session, _ = await consent_page(server, s)
    page = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI, state="rt",
                                                    response_type="token")))
    assert_error_redirect(page, "unsupported_response_type", "rt")


async def test_unknown_scope_is_invalid_scope(server):
    s = await page_setup(server)
    session, _ = await consent_page(server, s)
    page = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI, state="sc", scope="admin")))
    assert_error_redirect(page, "invalid_scope", "sc")


async def test_plain_pkce_method_is_invalid_request(server):
    s = await page_setup(server)
    session, _ = await consent_page(server, s)
    verifier, _ = pkce_pair()
    page = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI, state="pk",
                                                    code_challenge=verifier, code_challenge_method="plain")))
    assert_error_redirect(page, "invalid_request", "pk")


async def test_a_repeated_scope_is_invalid_request(server):
    s = await page_setup(server)
    session, _ = await consent_page(server, s)
    pairs = [("client_id", s.client_id), ("redirect_uri", REGISTERED_URI), ("response_type", "code"),
             ("state", "rep"), ("scope", "userinfo"), ("scope", "chat.read")]
    assert_error_redirect(await session.get(oauth_url(pairs)), "invalid_request", "rep")


async def test_a_repeated_state_is_invalid_request(server):
    s = await page_setup(server)
    session, _ = await consent_page(server, s)
    pairs = [("client_id", s.client_id), ("redirect_uri", REGISTERED_URI), ("response_type", "code"),
             ("state", "one"), ("state", "two"), ("scope", "userinfo")]
    page = await session.get(oauth_url(pairs))
    assert_error_redirect(page, "invalid_request", None)  # which state to echo is not fixed
    assert assert_redirect(page).get("state", ["one"])[0] in ("one", "two")


@pytest.mark.parametrize("pairs_of", [
    "client_id twice",
    "redirect_uri twice, evil first",
    "redirect_uri twice, evil second",
])
async def test_a_repeated_client_id_or_redirect_uri_never_redirects_to_an_unvalidated_uri(server, pairs_of):
    s = await page_setup(server)
    session, _ = await consent_page(server, s)
    evil = "https://evil.example/cb"
    common = [("response_type", "code"), ("state", "dup"), ("scope", "userinfo")]
    pairs = {
        "client_id twice": [("client_id", s.client_id), ("client_id", s.client_id),
                            ("redirect_uri", REGISTERED_URI)],
        "redirect_uri twice, evil first": [("client_id", s.client_id), ("redirect_uri", evil),
                                           ("redirect_uri", REGISTERED_URI)],
        "redirect_uri twice, evil second": [("client_id", s.client_id), ("redirect_uri", REGISTERED_URI),
                                            ("redirect_uri", evil)],
    }[pairs_of] + common
    page = await session.get(oauth_url(pairs))
    if page.status == 400:
        assert_error_page(page)
    else:
        assert_error_redirect(page, "invalid_request", "dup")  # to the registered URI only


# ---- page hardening --------------------------------------------------------------------------------------

async def test_pages_send_the_security_headers(server):
    s = await page_setup(server)
    session = PageSession(server)
    login = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI)))
    assert login.status == 200 and login.login_form() is not None
    assert_page_headers(login)

    consent = await session.log_in(login, s.user["email"], s.user["password"])
    assert consent.status == 200 and consent.consent_form() is not None
    assert_page_headers(consent)

    error = await session.get(oauth_url(front_params("cid_000000000000000000000000", REGISTERED_URI)))
    assert error.status == 400
    assert_page_headers(error)


async def test_consent_post_without_the_xsrf_field_is_refused(server):
    s = await page_setup(server)
    session, page = await consent_page(server, s, state="xsrf")
    assert "_xsrf" in page.consent_form().hidden()

    refused = await session.decide(page, "approve", drop=["_xsrf"])
    assert refused.status in (400, 403), (refused.status, refused.location)
    assert refused.location is None
    assert "lba_ac_" not in refused.response.text

    # The same form with its token still works: the refusal was about the token.
    query = assert_redirect(await session.decide(page, "approve"))
    assert query["state"] == ["xsrf"] and query["code"][0].startswith("lba_ac_")

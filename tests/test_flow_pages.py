"""The front channel: GET {auth_url}/oauth/ with its login form, consent page and redirects
(spec 4.1, contract 5), driven by a small cookie-keeping browser (tests/flow_helpers.PageSession).

Assumed page markup (not fixed by the contract): the login form is the form with a `password`
input (and an `email` input); the consent form is the form with submit buttons named `decision`,
valued `approve` and `deny`; both carry Tornado's `_xsrf` hidden input."""

from __future__ import annotations

import html
import re
from urllib.parse import quote, urlencode

import pytest

from tests.flow_helpers import (
    REGISTERED_URI,
    Page,
    PageSession,
    Setup,
    exchange,
    front_params,
    full_setup,
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
    assert set(query) == {"code", "state", "iss"}, query
    assert query["state"] == [state]
    assert query["iss"] == [server.settings.issuer]  # RFC 9207
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
    assert_error_redirect(page, "invalid_request", None)
    query = assert_redirect(page)
    # Refused for the repetition (RFC 6749 3.1), not for a state taken as missing: the description
    # says so. Which state to echo, if any, is not fixed; never both, never anything else.
    assert re.search(r"more than once|repeated|twice|duplicate", query["error_description"][0]), query
    assert "state" in query["error_description"][0], query
    assert query.get("state", []) in ([], ["one"], ["two"]), query
    assert query["iss"] == [server.settings.issuer], query


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


# ---- form-action: a form that can end at the client allows its origin (contract 5) ------------------------

def form_action(page: Page) -> list[str]:
    """The sources of the page's CSP `form-action` directive."""
    for directive in page.response.headers.get("Content-Security-Policy", "").split(";"):
        name, *sources = directive.split()
        if name == "form-action":
            return sources
    raise AssertionError(f"no form-action in {page.response.headers.get('Content-Security-Policy')}")


def assert_host_sources(sources: list[str]) -> None:
    """Never `*`, a wildcard host or a bare scheme: `'self'` and scheme://host[:port] only."""
    for source in sources:
        assert source == "'self'" or re.fullmatch(r"https?://[a-z0-9.-]+(:(\d+|\*))?", source), sources


async def test_every_sign_in_form_that_can_end_at_the_client_allows_its_origin(server):
    s = await page_setup(server)
    url = oauth_url(front_params(s.client_id, REGISTERED_URI, state="csp"))
    session = PageSession(server)
    shown = await session.get(url)  # the sign-in form shown by /oauth/
    assert shown.login_form() is not None
    assert form_action(shown) == ["'self'", "https://app.example"]
    wrong = await session.submit(shown, shown.login_form(), {"email": s.user["email"], "password": "nope nope nope"})
    assert wrong.status == 401 and wrong.login_form() is not None  # its re-render after a wrong password
    assert form_action(wrong) == ["'self'", "https://app.example"]
    direct = await session.get("/login?" + urlencode({"next": url}))
    assert direct.login_form() is not None and form_action(direct) == ["'self'", "https://app.example"]
    landed = await session.log_in(direct, s.user["email"], s.user["password"])
    assert landed.consent_form() is not None and form_action(landed) == ["'self'", "https://app.example"]


@pytest.mark.parametrize("next_url", [
    "/oauth/?client_id=cid_000000000000000000000000&redirect_uri=https%3A%2F%2Fevil.example%2Fcb",
    "/oauth/?client_id={cid}&redirect_uri=https%3A%2F%2Fevil.example%2Fcb",
    "/oauth/?client_id={cid}&redirect_uri=https%3A%2F%2Fapp.example%2Fcallback"
    "&redirect_uri=https%3A%2F%2Fevil.example%2Fcb",
    "/account/apps?redirect_uri=https%3A%2F%2Fevil.example%2Fcb",
    "/oauth/?client_id={cid}%2500&redirect_uri=https%3A%2F%2Fapp.example%2Fcallback",
])
async def test_an_attacker_chosen_next_adds_no_origin(server, next_url):
    s = await page_setup(server)
    session = PageSession(server)
    page = await session.get("/login?" + urlencode({"next": next_url.format(cid=s.client_id)}))
    assert page.status == 200 and page.login_form() is not None
    assert form_action(page) == ["'self'"]
    wrong = await session.submit(page, page.login_form(), {"email": s.user["email"], "password": "nope nope nope"})
    assert wrong.status == 401 and form_action(wrong) == ["'self'"]


async def test_a_loopback_redirect_uri_is_allowed_with_its_port(server):
    user = await server.create_user()
    app = await server.create_app(user["email"], redirect_uris=["http://127.0.0.1/cb"])
    for requested, source in [("http://127.0.0.1:5555/cb", "http://127.0.0.1:5555"),  # registered, any port
                              ("http://localhost:8123/x", "http://localhost:8123")]:  # the localhost rule
        page = await PageSession(server).get(oauth_url(front_params(app["clientId"], requested)))
        assert page.login_form() is not None, (requested, page.status, page.text[:200])
        assert form_action(page) == ["'self'", source]
        assert_host_sources(form_action(page))


async def test_a_private_use_scheme_is_reached_by_a_continue_page_not_a_bare_scheme_source(server):
    """No host-source names com.example.app:/cb, and a bare `com.example.app:` would admit every URI
    of the scheme: the form's answer is a page that goes on by a navigation, which form-action does
    not govern (docs/api.md)."""
    native = "com.example.app:/cb"
    user = await server.create_user()
    app = await server.create_app(user["email"], redirect_uris=[native])
    url = oauth_url(front_params(app["clientId"], native, state="native"))
    session = PageSession(server)
    shown = await session.get(url)
    assert form_action(shown) == ["'self'"]
    signed_in = await session.submit(shown, shown.login_form(), {"email": user["email"], "password": user["password"]})
    assert signed_in.status == 200, (signed_in.status, signed_in.location)
    assert continue_link(signed_in) == url
    consent = await session.get(url)
    assert consent.consent_form() is not None and form_action(consent) == ["'self'"]
    approved = await session.submit(consent, consent.consent_form(), {"decision": "approve"})
    assert approved.status == 200 and approved.location is None
    query = redirect_query(continue_link(approved), native)
    assert query["state"] == ["native"] and query["iss"] == [server.settings.issuer]
    r = await exchange(server, query["code"][0], native, app["clientId"], app["clientSecret"])
    assert r.status == 200, r.text


def continue_link(page: Page) -> str:
    """The page's "Continue" link, which its meta refresh also follows."""
    links = re.findall(r'<a [^>]*href="([^"]+)"[^>]*>Continue</a>', page.response.text)
    refresh = re.findall(r'<meta http-equiv="refresh" content="0; url=([^"]+)">', page.response.text)
    assert len(links) == 1 and refresh == links, page.response.text[:800]
    return html.unescape(links[0])


# ---- RFC 9207: iss on every redirect to the client ------------------------------------------------------

@pytest.mark.parametrize("case", ["access_denied", "invalid_request", "invalid_scope", "unsupported_response_type"])
async def test_every_error_redirect_carries_iss(server, case):
    s = await page_setup(server)
    session, consent = await consent_page(server, s, state="iss")
    if case == "access_denied":
        page = await session.decide(consent, "deny")
    else:
        params = {"invalid_request": front_params(s.client_id, REGISTERED_URI, state="iss", code_challenge="short",
                                                  code_challenge_method="S256"),
                  "invalid_scope": front_params(s.client_id, REGISTERED_URI, state="iss", scope="admin"),
                  "unsupported_response_type": front_params(s.client_id, REGISTERED_URI, state="iss",
                                                            response_type="token")}[case]
        page = await session.get(oauth_url(params))
    assert_error_redirect(page, case, "iss")
    metadata = (await server.client.get("/.well-known/oauth-authorization-server")).json
    assert redirect_query(page.location, REGISTERED_URI)["iss"] == [metadata["issuer"]]


# ---- an unregistered localhost redirect URI always asks (contract 5) -------------------------------------

async def test_an_unregistered_localhost_redirect_uri_always_gets_the_consent_page(server):
    s = await page_setup(server)
    session, consent = await consent_page(server, s, state="first")
    assert_redirect(await session.decide(consent, "approve"))  # a live grant for userinfo
    again = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI, state="again")))
    assert_redirect(again)  # the registered URI: the grant covers it, no question

    local = await session.get(oauth_url(front_params(s.client_id, LOCALHOST_URI, state="loc")))
    assert local.status == 200 and local.consent_form() is not None, (local.status, local.location)
    assert "device" in local.text.lower()
    query = assert_redirect(await session.decide(local, "approve"), LOCALHOST_URI)
    assert query["state"] == ["loc"] and query["code"][0].startswith("lba_ac_")
    second = await session.get(oauth_url(front_params(s.client_id, LOCALHOST_URI, state="loc2")))
    assert second.status == 200 and second.consent_form() is not None  # every time


# ---- state: optional with PKCE, echoed only when sent (contract 5) ---------------------------------------

def _without_state(client_id: str, challenge: str | None, **extra: str) -> dict[str, str]:
    params = front_params(client_id, REGISTERED_URI, **extra)
    del params["state"]
    if challenge is not None:
        params.update(code_challenge=challenge, code_challenge_method="S256")
    return params


@pytest.mark.parametrize("decision", ["approve", "deny"])
async def test_a_pkce_request_may_omit_state_and_gets_none_back(server, decision):
    s = await page_setup(server)
    verifier, challenge = pkce_pair()
    session = PageSession(server)
    page = await session.open_logged_in(oauth_url(_without_state(s.client_id, challenge)), s.user["email"],
                                        s.user["password"])  # the sign-in round trip keeps it state-less
    assert page.consent_form() is not None, (page.status, page.location, page.text[:300])
    assert "state" not in page.consent_form().hidden()
    query = assert_redirect(await session.decide(page, decision))
    assert "state" not in query and query["iss"] == [server.settings.issuer], query
    if decision == "approve":
        r = await exchange(server, query["code"][0], REGISTERED_URI, s.client_id, s.client_secret,
                           code_verifier=verifier)
        assert r.status == 200, r.text
        # The grant covers it now: the code comes at once, still without a state.
        again = await session.get(oauth_url(_without_state(s.client_id, challenge)))
        assert set(assert_redirect(again)) == {"code", "iss"}
    else:
        assert query["error"] == ["access_denied"]


async def test_an_empty_state_counts_as_none(server):
    """RFC 6749 3.1: a parameter sent without a value is treated as omitted."""
    s = await page_setup(server)
    _, challenge = pkce_pair()
    session, _ = await consent_page(server, s, state="sign-in")
    with_pkce = await session.get(oauth_url(_without_state(s.client_id, challenge, state="")))
    assert with_pkce.consent_form() is not None and "state" not in with_pkce.consent_form().hidden()
    query = assert_redirect(await session.decide(with_pkce, "approve"))
    assert "state" not in query and query["code"][0].startswith("lba_ac_")

    without_pkce = await session.get(oauth_url(_without_state(s.client_id, None, state="")))
    query = assert_redirect(without_pkce)
    assert query["error"] == ["invalid_request"] and "state" not in query


# ---- registered loopback URIs: any port (RFC 8252 7.3; contract 5) ---------------------------------------

async def test_a_registered_ipv6_loopback_uri_accepts_any_port_but_nothing_else(server):
    user = await server.create_user()
    app = await server.create_app(user["email"], redirect_uris=["http://[::1]/cb"])
    session = PageSession(server)
    for other in ["http://[::1]:5555/other", "https://[::1]:5555/cb", "http://[::1]:5555/cb?x=1",
                  "http://[::2]:5555/cb"]:
        assert_error_page(await session.get(oauth_url(front_params(app["clientId"], other))))
    requested = "http://[::1]:5555/cb"
    url = oauth_url(front_params(app["clientId"], requested, state="v6"))
    signed_in = await session.open_logged_in(url, user["email"], user["password"])
    assert continue_link(signed_in) == url
    page = await session.get(url)
    assert page.consent_form() is not None, (page.status, page.location, page.text[:300])
    approved = await session.submit(page, page.consent_form(), {"decision": "approve"})
    query = redirect_query(continue_link(approved), requested)  # no CSP host-source names [::1]
    assert query["state"] == ["v6"]
    r = await exchange(server, query["code"][0], requested, app["clientId"], app["clientSecret"])
    assert r.status == 200, r.text


async def test_a_missing_pkce_method_is_invalid_request(server):
    s = await page_setup(server)
    session, _ = await consent_page(server, s)
    _, challenge = pkce_pair()
    page = await session.get(oauth_url(front_params(s.client_id, REGISTERED_URI, state="pk", code_challenge=challenge)))
    assert_error_redirect(page, "invalid_request", "pk")


async def test_the_root_is_a_landing_page_and_get_logout_asks_first(server):
    """A new user's first two clicks: `/` (a JSON 404 before) and `GET /logout` ("This method is
    not allowed" before)."""
    visitor = PageSession(server)
    home = await visitor.get("/")
    assert home.status == 200 and home.response.headers["Content-Type"].startswith("text/html")
    for link in ('href="/login"', 'href="/console/"', 'href="/.well-known/openid-configuration"'):
        assert link in home.response.text
    s = await full_setup(server)
    browser = PageSession(server)
    await browser.open_logged_in("/account/", s.user["email"], s.user["password"])
    assert 'href="/account/apps"' in (await browser.get("/")).response.text
    asked = await browser.get("/logout")
    assert asked.status == 303 and asked.location == "/oauth/logout"
    confirm = await browser.get(asked.location)
    assert confirm.status == 200 and "Sign out of lbauth?" in confirm.text
    assert (await browser.get("/account/")).login_form() is None  # asking signs no one out


async def test_the_sign_in_page_names_the_app(server):
    """The user signing in for an app is told which one, on the first form and after a wrong
    password; a sign-in that leads nowhere in particular names none."""
    name = "Lighthouse Notes"
    s = await full_setup(server, name=name)
    browser = PageSession(server)
    page = await browser.follow(await browser.get(oauth_url(front_params(s.client_id, s.redirect_uri))))
    assert page.login_form() is not None and f"Sign in to continue to {name}" in page.text
    wrong = await browser.submit(page, page.login_form(), {"email": s.user["email"], "password": "wrong-password"})
    assert wrong.status == 401 and f"Sign in to continue to {name}" in wrong.text
    plain = await PageSession(server).get("/login?next=/account/")
    assert plain.login_form() is not None and "continue to" not in plain.text.replace("Sign in to continue.", "")
    elsewhere = await PageSession(server).get(
        "/login?next=" + quote(oauth_url(front_params(s.client_id, "https://evil.example/cb")), safe=""))
    assert name not in elsewhere.text  # an unregistered redirect URI names no app

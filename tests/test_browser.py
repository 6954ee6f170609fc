"""The user-facing pages in a real browser: Playwright (async API) driving Debian's Chromium.

The plain-HTTP tests (test_flow_pages, test_connected_apps) check the markup and the redirects;
these check that a browser, with its cookies, CSP, form submission and redirect handling, gets
through the same flows by clicking the buttons a person would click.

- Chromium is the Debian package `chromium` (/usr/bin/chromium), never `playwright install`'s
  download; `make test` installs it when run as root. Without it, or without the playwright
  package, these tests are skipped with the reason, except under CI=true, where they fail.
- One browser per test: Playwright's async objects belong to the event loop they were started on,
  and pytest-asyncio gives each test (and the `server` fixture) a loop of its own.
- The app's redirect URI (https://app.example/callback) is served by nothing: the browser's
  request to it is intercepted and answered by the test, which asserts on its URL.
- Each test saves a screenshot of the page it checks to tmp_path and to
  test-artifacts/screenshots/<test>-<backend>.png (the account pages: account-<page>-<backend>.png).
- Every page loads only from the server's own origin: each request the page makes is recorded and
  checked.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web

from lbauth.core.crypto import opaque
from tests.conftest import ROOT, TestServer
from tests.flow_helpers import (
    REGISTERED_URI,
    Setup,
    authorize,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    redirect_query,
    tokens_for,
)
from tests.support import TIMEOUT_MS, wait_until

try:
    from playwright.async_api import Browser, Page, Request, Route, expect
except ImportError:  # reported by the browser fixture, as a skip or (CI=true) a failure
    pass

SCREENSHOTS = ROOT / "test-artifacts" / "screenshots"
APP_NAME = "Moonbeam Notes"
USER_NAME = "Grace Hopper"


@dataclass
class Tab:
    """A page in a fresh browser context, with every URL it requested."""
    page: Page
    origin: str
    requested: list[str] = field(default_factory=list)
    intercepted: list[str] = field(default_factory=list)
    console: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return self.origin + path

    def assert_first_party(self) -> None:
        """Nothing but the server itself (and the intercepted redirect URI) was asked for anything."""
        assert self.requested, "the page made no request at all"
        foreign = [u for u in self.requested if _origin(u) != self.origin and u not in self.intercepted
                   and urlsplit(u).scheme not in ("data", "blob", "about")]
        assert not foreign, f"requests outside {self.origin}: {foreign}"

    def assert_no_csp_violation(self) -> None:
        """Chromium reports a blocked form submission or redirect on the console."""
        blocked = [m for m in self.console if "Content Security Policy" in m]
        assert not blocked, blocked


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def open_tab(browser: Browser, server: TestServer) -> Tab:
    context = await browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    tab = Tab(page=page, origin=server.url)
    page.on("request", lambda request: tab.requested.append(request.url))
    page.on("console", lambda message: tab.console.append(message.text))

    async def answer_for_the_app(route: Route) -> None:
        """The app's redirect URI: nothing serves it; record the URL and answer with a stub page."""
        tab.intercepted.append(route.request.url)
        await route.fulfill(status=200, content_type="text/html; charset=utf-8",
                            body="<!doctype html><title>app</title><p>Redirect received by the app.</p>")
    await page.route(_origin(REGISTERED_URI) + "/**", answer_for_the_app)
    return tab


async def screenshot(tab: Tab, tmp_path: Path, request: pytest.FixtureRequest, name: str,
                     artifact: str | None = None) -> Path:
    """The page as a PNG in tmp_path, copied to test-artifacts/screenshots/<test>-<backend>.png
    (<artifact>-<backend>.png when a test keeps several)."""
    path = tmp_path / f"{name}.png"
    await tab.page.screenshot(path=str(path), full_page=True)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    backend = request.node.callspec.params.get("backend", "none")
    shutil.copyfile(path, SCREENSHOTS / f"{artifact or request.node.originalname}-{backend}.png")
    return path


# ---- steps ---------------------------------------------------------------------------------------------

async def log_in(tab: Tab, email: str, password: str) -> None:
    """Sign in through /login as a person would, and wait to be sent on."""
    page = tab.page
    await page.goto(tab.url("/login"))
    await page.get_by_label("Email", exact=True).fill(email)
    await page.get_by_label("Password", exact=True).fill(password)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    await page.wait_for_url(lambda url: urlsplit(url).path != "/login")


async def page_setup(server: TestServer) -> Setup:
    user = await server.create_user(name=USER_NAME)
    app = await server.create_app(user["email"], name=APP_NAME, redirect_uris=[REGISTERED_URI])
    return Setup(user=user, token="", app=app)


async def open_consent(tab: Tab, s: Setup, state: str) -> None:
    """Log in through /login, then open the authorization page; it must ask for consent."""
    await log_in(tab, s.user["email"], s.user["password"])
    response = await tab.page.goto(tab.url(oauth_url(front_params(s.client_id, REGISTERED_URI, state=state))))
    assert response is not None and response.status == 200, response and response.status
    await expect(tab.page.get_by_role("button", name="Approve")).to_be_visible()
    await expect(tab.page.get_by_role("button", name="Deny")).to_be_visible()
    await expect(tab.page.get_by_role("heading", level=1)).to_contain_text(APP_NAME)


async def consent_tab(browser: Browser, server: TestServer, state: str, tmp_path: Path,
                      request: pytest.FixtureRequest) -> tuple[Setup, Tab]:
    """A user and app, signed in on the consent page for `state`; the page's screenshot saved."""
    s = await page_setup(server)
    tab = await open_tab(browser, server)
    await open_consent(tab, s, state)
    await screenshot(tab, tmp_path, request, "consent")
    return s, tab


async def decide(tab: Tab, button: str) -> dict[str, list[str]]:
    """Click Approve or Deny; the browser is sent to the redirect URI; its query, name -> values."""
    def to_the_app(request: Request) -> bool:
        return request.url.startswith(REGISTERED_URI)
    async with tab.page.expect_request(to_the_app) as caught:
        await tab.page.get_by_role("button", name=button).click()
    url = (await caught.value).url
    await tab.page.wait_for_url(url)  # the browser followed the redirect to the (stubbed) app page
    assert url in tab.intercepted, (url, tab.intercepted)
    return redirect_query(url, REGISTERED_URI)


# ---- a, b: the consent page --------------------------------------------------------------------------

async def test_approve_in_the_browser_lands_on_the_redirect_uri_with_a_code(browser, server, tmp_path, request):
    state = "browser st & é/?="
    s, tab = await consent_tab(browser, server, state, tmp_path, request)

    query = await decide(tab, "Approve")
    assert set(query) == {"code", "state", "iss"}, query
    assert query["state"] == [state]
    (code,) = query["code"]
    assert code.startswith(opaque.CODE), code
    r = await exchange(server, code, REGISTERED_URI, s.client_id, s.client_secret)
    assert r.status == 200, r.text
    tab.assert_first_party()
    tab.assert_no_csp_violation()


async def test_deny_in_the_browser_lands_on_the_redirect_uri_with_access_denied(browser, server, tmp_path,
                                                                                 request):
    state = "deny in browser"
    s, tab = await consent_tab(browser, server, state, tmp_path, request)

    query = await decide(tab, "Deny")
    assert query["error"] == ["access_denied"], query
    assert query["state"] == [state], query
    assert "code" not in query
    tab.assert_first_party()
    tab.assert_no_csp_violation()


# ---- a returning user signs in and lands at the app (issue 19 section 1; contract 5) ------------------

async def sign_out(tab: Tab) -> None:
    """Press "Sign out" in the page header, on a page of the server."""
    await tab.page.goto(tab.url("/account/apps"))
    await tab.page.get_by_role("button", name="Sign out").click()
    await tab.page.wait_for_url(lambda url: urlsplit(url).path == "/login")


async def sign_in_and_land(tab: Tab, email: str, password: str, redirect_uri: str, *,
                           wrong_password_first: bool = False) -> str:
    """On the sign-in form that /oauth/ shows, sign in; the browser must reach `redirect_uri`:
    the URL it lands at."""
    page = tab.page
    if wrong_password_first:
        await page.get_by_label("Email", exact=True).fill(email)
        await page.get_by_label("Password", exact=True).fill(password + " typo")
        await page.get_by_role("button", name="Sign in", exact=True).click()
        await expect(page.get_by_role("alert")).to_be_visible()
    await page.get_by_label("Email", exact=True).fill(email)
    await page.get_by_label("Password", exact=True).fill(password)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    await page.wait_for_url(lambda url: url.startswith(redirect_uri))
    await expect(page.get_by_text("Redirect received by the app.")).to_be_visible()
    return page.url


class LoopbackApp:
    """A native app's redirect listener on [::1], on an ephemeral port (RFC 8252 7.3): a real
    server, since Playwright's routing does not see a redirect that follows a meta refresh."""

    def __init__(self) -> None:
        self.received: list[str] = []
        sockets = tornado.netutil.bind_sockets(0, "::1")
        self.port = sockets[0].getsockname()[1]
        app = tornado.web.Application([(r"/cb", _LoopbackHandler, {"received": self.received})])
        self.server = tornado.httpserver.HTTPServer(app)
        self.server.add_sockets(sockets)

    @property
    def redirect_uri(self) -> str:
        return f"http://[::1]:{self.port}/cb"


class _LoopbackHandler(tornado.web.RequestHandler):
    def initialize(self, received: list[str]) -> None:
        self.received = received

    def get(self) -> None:
        self.received.append(self.request.uri)
        self.write("<!doctype html><title>app</title><p>Redirect received by the app.</p>")


async def returning_user_lands_at_the_app(browser: Browser, server: TestServer, registered_uri: str,
                                          request_uri: str, *, wrong_password_first: bool) -> tuple[Tab, str]:
    """Approve the app, sign out, open the app's /oauth/ link again and sign in: the browser lands
    at the redirect URI with a code that the app exchanges, and Chromium reports no CSP violation.
    The URL it landed at."""
    user = await server.create_user(name=USER_NAME)
    app = await server.create_app(user["email"], name=APP_NAME, redirect_uris=[registered_uri])
    tab = await open_tab(browser, server)
    link = tab.url(oauth_url(front_params(app["clientId"], request_uri, state="returning")))
    await log_in(tab, user["email"], user["password"])
    await tab.page.goto(link)
    await tab.page.get_by_role("button", name="Approve").click()
    await tab.page.wait_for_url(lambda url: url.startswith(request_uri))
    await sign_out(tab)

    await tab.page.goto(link)
    await expect(tab.page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    landed = await sign_in_and_land(tab, user["email"], user["password"], request_uri,
                                    wrong_password_first=wrong_password_first)
    query = redirect_query(landed, request_uri)
    assert query["state"] == ["returning"] and query["iss"] == [server.settings.issuer], query
    (code,) = query["code"]
    r = await exchange(server, code, request_uri, app["clientId"], app["clientSecret"])
    assert r.status == 200, r.text
    tab.assert_no_csp_violation()
    return tab, landed


@pytest.mark.parametrize("wrong_password_first", [False, True], ids=["signs-in", "wrong-password-first"])
async def test_a_returning_user_signs_in_and_lands_at_the_app(browser, server, tmp_path, request,
                                                               wrong_password_first):
    tab, landed = await returning_user_lands_at_the_app(browser, server, REGISTERED_URI, REGISTERED_URI,
                                                        wrong_password_first=wrong_password_first)
    assert landed in tab.intercepted, (landed, tab.intercepted)
    await screenshot(tab, tmp_path, request, "returning-user-landed")
    tab.assert_first_party()


async def test_a_returning_user_lands_at_an_ipv6_loopback_app_on_any_port(browser, server):
    """A registered port-less http://[::1]/cb, called back on an ephemeral port (RFC 8252 7.3). No
    CSP host-source can name an IPv6 literal: the sign-in and the consent go on by a navigation."""
    listener = LoopbackApp()
    try:
        _, landed = await returning_user_lands_at_the_app(browser, server, "http://[::1]/cb", listener.redirect_uri,
                                                          wrong_password_first=False)
    finally:
        listener.server.stop()
    assert len(listener.received) == 2 and landed.endswith(listener.received[-1]), (landed, listener.received)


# ---- c: Connected apps ---------------------------------------------------------------------------------

async def test_revoke_in_connected_apps_ends_the_apps_access(browser, server, tmp_path, request):
    s = await full_setup(server, name=APP_NAME)
    tokens = await tokens_for(server, s)  # a grant, through the API
    assert (await server.client.get("/api/auth/me", bearer=tokens["accessToken"])).status == 200

    tab = await open_tab(browser, server)
    page = tab.page
    await log_in(tab, s.user["email"], s.user["password"])
    await page.goto(tab.url("/account/apps"))
    main = page.locator("main")
    await expect(main).to_contain_text(APP_NAME)
    await page.get_by_role("link", name="Revoke access").click()

    await page.wait_for_url(re.compile(r"/account/apps/[^/]+/revoke$"))
    await expect(page.get_by_role("heading", level=1)).to_contain_text(APP_NAME)
    await page.get_by_role("button", name="Revoke access").click()

    await page.wait_for_url(lambda url: urlsplit(url).path == "/account/apps")
    await expect(page.get_by_role("status")).to_contain_text(re.compile("revoked", re.IGNORECASE))
    await expect(main).not_to_contain_text(APP_NAME)
    await expect(page.get_by_role("link", name="Revoke access")).to_have_count(0)
    await screenshot(tab, tmp_path, request, "connected-apps-after-revoke")

    (await server.client.get("/api/auth/me", bearer=tokens["accessToken"])).assert_error(401, "oauth2.token.revoked")
    tab.assert_first_party()


# ---- d: the console ------------------------------------------------------------------------------------

async def shown_value(page: Page, selector: str) -> str:
    """The text an element shows: an input's value, or the element's text."""
    element = page.locator(selector)
    await expect(element).to_have_count(1)
    value = await element.evaluate("e => (e.tagName === 'INPUT' || e.tagName === 'TEXTAREA') ? e.value"
                                   " : e.textContent")
    return (value or "").strip()


def _reason(body: bytes) -> str | None:
    try:
        return json.loads(body).get("reason")
    except (ValueError, AttributeError):
        return None


async def test_console_creates_an_app_and_sends_a_test_webhook(browser, dev_server, receiver, tmp_path, request):
    server = dev_server
    user = await server.create_user(name=USER_NAME)
    tab = await open_tab(browser, server)
    page = tab.page
    await log_in(tab, user["email"], user["password"])

    response = await page.goto(tab.url("/console/"))
    assert response is not None and response.status == 200, f"/console/ answered {response and response.status}"
    await expect(page.get_by_role("heading", level=1, name="Your apps")).to_be_visible()
    await page.get_by_role("link", name="Create an app").click()
    await page.wait_for_url(lambda url: urlsplit(url).path == "/console/apps/new")

    await page.locator("input[name=name]").fill(APP_NAME)
    await page.locator("textarea[name=redirect_uris]").fill(REGISTERED_URI)
    await page.locator("input[type=checkbox][name=scopes][value=userinfo]").check()
    await page.locator("input[name=webhook_url]").fill(receiver.url)
    await page.get_by_role("button", name="Create app").click()

    await expect(page.locator("#client-secret")).to_be_visible()
    client_id = await shown_value(page, "#client-id")
    client_secret = await shown_value(page, "#client-secret")
    webhook_secret = await shown_value(page, "#webhook-secret")
    assert client_id and client_secret and webhook_secret
    assert client_secret.startswith(opaque.CLIENT_SECRET), client_secret[:12]
    assert webhook_secret.startswith(opaque.WEBHOOK_SECRET), webhook_secret[:12]
    # Each value has its "Copy" button beside it (in the same parent element). Checked at the end, so
    # that a missing button does not hide what the rest of the test finds.
    without_copy = [selector for selector in ("#client-id", "#client-secret", "#webhook-secret")
                    if not await page.locator(selector).locator("xpath=..").get_by_role("button", name="Copy").count()]
    assert client_secret not in page.url and webhook_secret not in page.url

    # The secret shown is the app's: it redeems a code issued to the user for this client id.
    user_token = await server.login(user["email"], user["password"])
    r = await authorize(server, user_token, client_id, REGISTERED_URI)
    assert r.status == 200, r.text
    r = await exchange(server, r.data["code"], REGISTERED_URI, client_id, client_secret)
    assert r.status == 200, r.text

    async with page.expect_event("load"):  # the page that comes back, not the one with the secrets
        await page.get_by_role("button", name="Send test webhook").click()
    await expect(page.locator(".notice, [role=status]").first).to_be_visible()
    app_page = page.url

    def test_delivery_arrived() -> bool:
        return any(_reason(hit.body) == "test_delivery" for hit in receiver.received)
    await wait_until(test_delivery_arrived, 10, "the receiver to get the test delivery")

    async def delivery_shown() -> bool:
        response = await page.goto(app_page)
        assert response is not None and response.status == 200, (app_page, response and response.status)
        deliveries = page.locator("#deliveries")
        return bool(await deliveries.count() and re.search(r"\b200\b", await deliveries.inner_text()))
    await wait_until(delivery_shown, 10, f"#deliveries to show 200 on {app_page}", step=0.3)
    await screenshot(tab, tmp_path, request, "console-app")
    tab.assert_first_party()
    assert not without_copy, f"no Copy button beside {without_copy} on the page that showed the secrets"


# ---- every page: on a phone, labelled, keyboard-reachable --------------------------------------------

PHONE = {"width": 360, "height": 740}


async def page_problems(page: Page) -> list[str]:
    """What a phone user or a keyboard / screen-reader user would trip over on the current page."""
    return await page.evaluate("""() => {
      const problems = [];
      if (document.documentElement.scrollWidth > window.innerWidth + 1)
        problems.push(`scrolls sideways: ${document.documentElement.scrollWidth}px on a ${window.innerWidth}px screen`);
      for (const el of document.querySelectorAll('input:not([type=hidden]), textarea, select')) {
        const labelled = (el.id && document.querySelector(`label[for="${el.id}"]`)) || el.closest('label')
          || el.getAttribute('aria-label');
        if (!labelled) problems.push(`no label: ${el.outerHTML.slice(0, 80)}`);
      }
      for (const el of document.querySelectorAll('button, a[href]')) {
        if (!el.textContent.trim() && !el.getAttribute('aria-label'))
          problems.push(`no name: ${el.outerHTML.slice(0, 80)}`);
        if (el.getAttribute('tabindex') && Number(el.getAttribute('tabindex')) > 0)
          problems.push(`tabindex > 0 reorders the focus: ${el.outerHTML.slice(0, 80)}`);
      }
      if (!document.querySelector('h1')) problems.push('no h1');
      if (!document.documentElement.lang) problems.push('no lang attribute');
      return problems;
    }""")


async def test_every_page_works_on_a_phone_and_with_a_keyboard(browser, dev_server, tmp_path, request):
    s = await page_setup(dev_server)
    context = await browser.new_context(viewport=PHONE)
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    tab = Tab(page=page, origin=dev_server.url)
    page.on("request", lambda r: tab.requested.append(r.url))
    await page.goto(tab.url("/login"))
    found = {"/login": await page_problems(page)}
    # The first Tab stop is the skip link or the first field: nothing hidden comes first.
    await page.keyboard.press("Tab")
    assert await page.evaluate("document.activeElement.tagName") in ("A", "INPUT")
    await log_in(tab, s.user["email"], s.user["password"])
    consent = oauth_url(front_params(s.client_id, REGISTERED_URI, state="phone"))
    pages = [consent, "/account/apps", "/account/", "/account/sessions", "/account/security", "/account/delete",
             "/console/", "/console/apps/new", "/console/apps/nonexistent", f"/console/apps/{s.client_id}"]
    app_owner_pages = {f"/console/apps/{s.client_id}"}
    for path in pages:
        response = await page.goto(tab.url(path))
        assert response is not None and response.status in (200, 404), (path, response and response.status)
        if path in app_owner_pages:
            await expect(page.get_by_role("heading", level=1)).to_contain_text(APP_NAME)
        found[path] = await page_problems(page)
    await screenshot(tab, tmp_path, request, "console-on-a-phone")
    tab.assert_first_party()
    assert {path: problems for path, problems in found.items() if problems} == {}


# ---- e: the account pages (contract 16) ----------------------------------------------------------------

NEW_PASSWORD = "a much longer passphrase 42"


async def api_session(server: TestServer, user: dict, agent: str) -> str:
    """A user token from POST /api/auth/login, its session recorded with this User-Agent."""
    r = await server.client.post("/api/auth/login", json={"email": user["email"], "password": user["password"]},
                                 headers={"User-Agent": agent})
    assert r.status == 200, r.text
    return r.data["token"]


async def api_session_ended(server: TestServer, user_token: str) -> bool:
    r = await server.client.get("/api/account/sessions", bearer=user_token)
    if r.status == 200:
        return False
    r.assert_error(401, "oauth2.token.revoked")
    return True


async def focused(page: Page) -> dict[str, str]:
    """The focused element: its id, tag, accessible text, and whether its focus ring shows."""
    return await page.evaluate("""() => {
      const el = document.activeElement, style = getComputedStyle(el);
      return {id: el.id, tag: el.tagName, text: (el.textContent || '').trim(),
              ring: style.outlineStyle !== 'none' && parseFloat(style.outlineWidth) >= 2 ? 'yes' : 'no'};
    }""")


async def tab_until(page: Page, element_id: str, limit: int = 20) -> list[str]:
    """Press Tab until the element `element_id` has the focus; what the focus stopped on, in order
    (an id, or a link's or button's text). Every stop must show its focus ring."""
    stops = []
    for _ in range(limit):
        await page.keyboard.press("Tab")
        now = await focused(page)
        assert now["ring"] == "yes", f"no visible focus on {now}"
        stops.append(now["id"] or now["text"])
        if now["id"] == element_id:
            return stops
    raise AssertionError(f"{limit} Tabs never reached #{element_id}: {stops}")


async def type_over(page: Page, text: str) -> None:
    """Replace the focused field's text, as a person does: select all, type."""
    await page.keyboard.press("Control+A")
    await page.keyboard.type(text)


async def test_a_user_manages_their_account_with_the_keyboard(browser, server, tmp_path, request):
    """Sign in; edit the profile with the keyboard alone; end a session of another device; change
    the password; delete the account through its confirmation. Each step is what the API sees."""
    user = await server.create_user(name=USER_NAME)
    cli = await api_session(server, user, "lbauth-tests-cli/1.0")
    sync = await api_session(server, user, "lbauth-tests-sync/2.0")
    tab = await open_tab(browser, server)
    page = tab.page
    await log_in(tab, user["email"], user["password"])

    # the profile, keyboard only: the header's links, then the form's fields in reading order
    await page.goto(tab.url("/account/"))
    stops = await tab_until(page, "name")
    assert stops == ["Skip to content", "Profile", "Sessions", "Activity", "Connected apps", "Console", "Sign out",
                     "name"], stops
    await type_over(page, "Ada Lovelace")
    await page.keyboard.press("Tab")
    assert (await focused(page))["id"] == "avatar"
    await type_over(page, "https://img.example/ada.png")
    await page.keyboard.press("Tab")
    assert (await focused(page))["id"] == "bio"
    await type_over(page, "Analyst of engines")
    await page.keyboard.press("Tab")
    assert (await focused(page))["id"] == "interest_tags"
    await type_over(page, "maths, poetry")
    await page.keyboard.press("Tab")
    save = await focused(page)
    assert (save["tag"], save["text"], save["ring"]) == ("BUTTON", "Save profile", "yes"), save
    await page.keyboard.press("Enter")
    await page.wait_for_url(lambda url: "saved=profile" in url)
    await expect(page.get_by_role("status")).to_contain_text("Profile saved")
    await expect(page.get_by_label("Name", exact=True)).to_have_value("Ada Lovelace")
    await screenshot(tab, tmp_path, request, "profile", "account-profile")
    profile = (await server.client.get("/api/account/profile", bearer=sync)).data
    assert (profile["name"], profile["bio"], profile["interestTags"]) == ("Ada Lovelace", "Analyst of engines",
                                                                         ["maths", "poetry"]), profile

    # the sessions: this browser is marked; end the command-line tool's session
    await page.get_by_role("link", name="Sessions").click()
    await page.wait_for_url(lambda url: urlsplit(url).path == "/account/sessions")
    entries = page.locator("li.session")
    await expect(entries).to_have_count(3)
    await expect(entries.filter(has_text="This browser")).to_have_count(1)
    await expect(entries.filter(has_text="This browser")).to_contain_text("Browser")
    cli_entry = entries.filter(has_text="lbauth-tests-cli")  # the device in words: the program's name
    await expect(cli_entry).to_contain_text("API token")
    await screenshot(tab, tmp_path, request, "sessions", "account-sessions")
    await cli_entry.get_by_role("button", name="End").click()
    await page.wait_for_url(lambda url: "ended=one" in url)
    await expect(page.get_by_role("status")).to_contain_text("Session ended")
    await expect(entries).to_have_count(2)
    await expect(entries.filter(has_text="lbauth-tests-cli")).to_have_count(0)
    assert await api_session_ended(server, cli)
    assert not await api_session_ended(server, sync)

    # the password: every other session ends (the sync tool's)
    await page.get_by_role("link", name="Profile").click()
    await page.wait_for_url(lambda url: urlsplit(url).path == "/account/")
    await page.get_by_label("Current password", exact=True).fill(user["password"])
    await page.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    await page.get_by_label("Confirm new password", exact=True).fill(NEW_PASSWORD + " typo")
    await page.get_by_role("button", name="Change password").click()
    await expect(page.get_by_role("alert")).to_contain_text("not the same")
    await expect(page.get_by_label("Confirm new password", exact=True)).to_be_focused()
    await page.get_by_label("Current password", exact=True).fill(user["password"])
    await page.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    await page.get_by_label("Confirm new password", exact=True).fill(NEW_PASSWORD)
    await page.get_by_role("button", name="Change password").click()
    await page.wait_for_url(lambda url: "saved=password" in url)
    await expect(page.get_by_role("status")).to_contain_text("1 other session was ended")
    await screenshot(tab, tmp_path, request, "password", "account-password")
    assert await api_session_ended(server, sync)

    # leaving: the confirmation, then the account is gone
    await page.get_by_role("link", name="Delete account").click()
    await page.wait_for_url(lambda url: urlsplit(url).path == "/account/delete")
    await expect(page.get_by_role("heading", level=1)).to_contain_text("Delete your account")
    await expect(page.locator("main")).to_contain_text("cannot be undone")
    await screenshot(tab, tmp_path, request, "delete", "account-delete")
    await page.get_by_label("Your password, to confirm").fill(NEW_PASSWORD)
    await page.get_by_role("button", name="Delete my account").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text("Your account has been deleted")
    await expect(page.get_by_role("button", name="Sign out")).to_have_count(0)
    await screenshot(tab, tmp_path, request, "deleted", "account-deleted")
    r = await server.client.post("/api/auth/login", json={"email": user["email"], "password": NEW_PASSWORD})
    r.assert_error(401, "auth.login.failed")
    await page.goto(tab.url("/account/"))
    await expect(page.get_by_role("button", name="Sign in", exact=True)).to_be_visible()
    tab.assert_first_party()
    tab.assert_no_csp_violation()


async def test_the_account_pages_on_a_phone(browser, server, tmp_path, request):
    """At 360 px nothing scrolls sideways, a 200-character user agent included; every field is
    labelled, and a refused form's message sits by its field."""
    user = await server.create_user(name=USER_NAME)
    await api_session(server, user, "Mozilla/5.0(" + "X" * 187 + ")")
    context = await browser.new_context(viewport=PHONE)
    context.set_default_timeout(TIMEOUT_MS)
    page = await context.new_page()
    tab = Tab(page=page, origin=server.url)
    page.on("request", lambda r: tab.requested.append(r.url))
    await log_in(tab, user["email"], user["password"])
    found = {}
    for path, name in (("/account/", "profile"), ("/account/sessions", "sessions"), ("/account/delete", "delete")):
        response = await page.goto(tab.url(path))
        assert response is not None and response.status == 200, (path, response and response.status)
        found[path] = await page_problems(page)
        await screenshot(tab, tmp_path, request, f"phone-{name}", f"account-phone-{name}")
    await page.goto(tab.url("/account/"))
    await page.get_by_label("Current password", exact=True).fill("not my password")
    await page.get_by_label("New password", exact=True).fill(NEW_PASSWORD)
    await page.get_by_label("Confirm new password", exact=True).fill(NEW_PASSWORD)
    await page.get_by_role("button", name="Change password").click()
    await expect(page.get_by_role("alert")).to_contain_text("wrong")
    await expect(page.get_by_label("Current password", exact=True)).to_be_focused()
    found["/account/password (refused)"] = await page_problems(page)
    await screenshot(tab, tmp_path, request, "phone-refused", "account-phone-refused")
    tab.assert_first_party()
    assert {path: problems for path, problems in found.items() if problems} == {}


# ---- layout: what a screenshot shows a person ------------------------------------------------------------

async def _boxes(page: Page, *locators: Any) -> list[dict[str, float]]:
    boxes = [await locator.bounding_box() for locator in locators]
    assert all(box is not None for box in boxes), boxes
    return boxes  # type: ignore[return-value]


def _side_by_side_or_stacked_evenly(a: dict[str, float], b: dict[str, float]) -> None:
    """Two buttons of one decision: on one row, the same top and height; stacked, the same left
    and width. A margin on one of them (the consent page's Approve) broke this."""
    if abs(a["y"] - b["y"]) < a["height"] / 2:
        assert abs(a["y"] - b["y"]) < 1 and abs(a["height"] - b["height"]) < 1, (a, b)
    else:
        assert abs(a["x"] - b["x"]) < 1 and abs(a["width"] - b["width"]) < 1, (a, b)


@pytest.mark.parametrize("viewport", [{"width": 1024, "height": 800}, PHONE], ids=["desktop", "phone"])
async def test_decision_buttons_line_up_and_scope_names_stay_whole(browser, server, tmp_path, request, viewport):
    s = await page_setup(server)
    tab = await open_tab(browser, server)
    await tab.page.set_viewport_size(viewport)
    await log_in(tab, s.user["email"], s.user["password"])
    scopes = "userinfo chat.read chat.write memory.read plaza.write agent_memory"
    await tab.page.goto(tab.url(oauth_url(front_params(s.client_id, REGISTERED_URI, scope=scopes))))
    await screenshot(tab, tmp_path, request, "consent", f"consent-layout-{viewport['width']}")
    page = tab.page
    _side_by_side_or_stacked_evenly(*await _boxes(page, page.get_by_role("button", name="Approve"),
                                                  page.get_by_role("button", name="Deny")))
    names = page.locator("code.scope-name")
    heights = [box["height"] for box in await _boxes(page, *[names.nth(i) for i in range(await names.count())])]
    assert len(heights) == 6 and max(heights) - min(heights) < 1, heights  # none wraps onto a second line

    await page.goto(tab.url("/logout"))
    await expect(page.get_by_role("heading", level=1)).to_contain_text("Sign out")
    await screenshot(tab, tmp_path, request, "logout", f"logout-layout-{viewport['width']}")
    main = page.locator("#main")  # the header has a Sign out button of its own
    _side_by_side_or_stacked_evenly(*await _boxes(page, main.get_by_role("button", name="Sign out"),
                                                  main.get_by_role("link", name="Stay signed in")))

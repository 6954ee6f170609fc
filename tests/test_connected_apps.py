"""The "Connected apps" pages at {auth_url}/account/apps (contract sections 5 and 7): the list of the
apps a user authorized, with each scope's meaning; a confirmation page per app; a POST (with its XSRF
token) that revokes the grant, with the same effect as DELETE /api/auth/authorizations/{clientId}.

Assumed markup (not fixed by the contract): the login form is the form with a `password` input;
each app links to /account/apps/{clientId}/revoke; the confirmation is a POST form whose action is
that same URL (or empty), carrying Tornado's `_xsrf` hidden input. Scope meanings are checked by a
keyword of the specification's table (spec 2): voice "text-to-speech", plaza.read "browse feed",
chat.read "message history"."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import quote, unquote, urlsplit

from tests.flow_helpers import Form, Page, PageSession, Setup, code_for, full_setup, tokens_for

APPS = "/account/apps"


def revoke_path(client_id: str) -> str:
    return f"{APPS}/{quote(client_id, safe='')}/revoke"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v)


def link_paths(page: Page) -> set[str]:
    """The paths of the page's links on this server, unquoted."""
    parser = _Links()
    parser.feed(page.response.text)
    paths = set()
    for href in parser.hrefs:
        parts = urlsplit(href)
        if not parts.netloc or parts.netloc == urlsplit(page.url).netloc:
            paths.add(unquote(parts.path))
    return paths


def revoke_form(page: Page, client_id: str) -> Form | None:
    """The POST form that submits to this app's revoke URL."""
    target = revoke_path(client_id)
    for form in page.forms:
        action = urlsplit(form.action).path if form.action else urlsplit(page.url).path
        if form.method == "post" and unquote(action) == unquote(target):
            return form
    return None


def assert_page_headers(page: Page) -> None:
    h = page.response.headers
    assert h.get("X-Frame-Options") == "DENY", dict(h)
    assert "frame-ancestors 'none'" in h.get("Content-Security-Policy", "")
    assert h.get("Referrer-Policy") == "no-referrer"
    assert "no-store" in h.get("Cache-Control", "")


async def logged_in(server, s: Setup, url: str = APPS) -> tuple[PageSession, Page]:
    """A browser that opened `url`, met the login form, signed in, and is back on `url`."""
    session = PageSession(server)
    first = await session.get(url)
    assert first.status == 200 and first.login_form() is not None, (first.status, first.text[:300])
    page = await session.log_in(first, s.user["email"], s.user["password"])
    assert page.status == 200, (page.status, page.location, page.text[:300])
    assert urlsplit(page.url).path == urlsplit(url).path, page.url
    return session, page


async def second_app(server, s: Setup, name: str) -> Setup:
    app = await server.create_app(s.user["email"], name=name, redirect_uris=[s.redirect_uri])
    return Setup(user=s.user, token=s.token, app=app)


async def me_status(server, access_token: str):
    return await server.client.get("/api/auth/me", bearer=access_token)


async def listed_client_ids(server, s: Setup) -> list[str]:
    r = await server.client.get("/api/auth/authorizations", bearer=s.token)
    return [item["clientId"] for item in r.data["items"]]


# ---- not logged in ------------------------------------------------------------------------------------

async def test_connected_apps_shows_the_login_form_to_a_visitor(server):
    s = await full_setup(server, name="Moonbeam Notes")
    await code_for(server, s)
    page = await PageSession(server).get(APPS)
    assert page.status == 200, (page.status, page.location)
    assert page.login_form() is not None, page.text[:300]
    assert "Moonbeam Notes" not in page.text
    assert_page_headers(page)


async def test_revoke_confirmation_shows_the_login_form_then_comes_back(server):
    s = await full_setup(server, name="Moonbeam Notes")
    await code_for(server, s)
    _, page = await logged_in(server, s, revoke_path(s.client_id))
    assert "Moonbeam Notes" in page.text
    assert revoke_form(page, s.client_id) is not None, page.text[:500]


# ---- the list -----------------------------------------------------------------------------------------

async def test_connected_apps_lists_each_authorized_app_with_its_scopes_meanings(server):
    s = await full_setup(server, name="Moonbeam Notes")
    t = await second_app(server, s, "Plaza Reader")
    u = await second_app(server, s, "Never Authorized")
    await code_for(server, s, ["voice"])
    await code_for(server, t, ["plaza.read"])

    _, page = await logged_in(server, s)
    assert_page_headers(page)
    assert "Moonbeam Notes" in page.text and "Plaza Reader" in page.text
    assert "Never Authorized" not in page.text
    text = page.text.lower()
    assert "speech" in text, page.text  # voice: text-to-speech
    assert "feed" in text, page.text  # plaza.read: browse feed, posts and comments
    assert "message" not in text, page.text  # chat.read was granted to no app
    links = link_paths(page)
    assert revoke_path(s.client_id) in links and revoke_path(t.client_id) in links, links
    assert revoke_path(u.client_id) not in links


async def test_connected_apps_without_grants_lists_no_app(server):
    s = await full_setup(server, name="Moonbeam Notes")
    _, page = await logged_in(server, s)
    assert "Moonbeam Notes" not in page.text
    assert not any(p.endswith("/revoke") for p in link_paths(page))


async def test_connected_apps_escapes_the_app_name(server):
    name = '<script>alert("x")</script><b>Bold</b>'
    s = await full_setup(server, name=name)
    await code_for(server, s)
    _, page = await logged_in(server, s)
    assert name not in page.response.text
    assert name in page.text


async def test_connected_apps_shows_only_the_users_own_apps(server):
    s = await full_setup(server, name="Moonbeam Notes")
    await code_for(server, s)
    other = await server.create_user()
    b = Setup(user=other, token=await server.login(other["email"], other["password"]), app=s.app)
    _, page = await logged_in(server, b)
    assert "Moonbeam Notes" not in page.text
    assert revoke_path(s.client_id) not in link_paths(page)


# ---- confirm and revoke ---------------------------------------------------------------------------------

async def test_the_confirmation_page_names_the_app_and_revokes_nothing(server):
    s = await full_setup(server, name="Moonbeam Notes")
    tokens = await tokens_for(server, s, ["voice"])
    session, _ = await logged_in(server, s)
    page = await session.get(revoke_path(s.client_id))
    assert page.status == 200, (page.status, page.text[:300])
    assert_page_headers(page)
    assert "Moonbeam Notes" in page.text
    form = revoke_form(page, s.client_id)
    assert form is not None, page.text[:500]
    assert "_xsrf" in form.hidden()
    assert (await me_status(server, tokens["accessToken"])).status == 200
    assert await listed_client_ids(server, s) == [s.client_id]


async def test_confirming_revokes_the_app_and_returns_to_the_list(server):
    s = await full_setup(server, name="Moonbeam Notes")
    t = await second_app(server, s, "Plaza Reader")
    mine = await tokens_for(server, s, ["voice"])
    theirs = await tokens_for(server, t, ["plaza.read"])
    session, _ = await logged_in(server, s)
    page = await session.get(revoke_path(s.client_id))

    result = await session.submit(page, revoke_form(page, s.client_id))
    assert result.status == 303, (result.status, result.text[:300])
    assert urlsplit(session.absolute(result.location, result.url)).path == APPS

    (await me_status(server, mine["accessToken"])).assert_error(401, "oauth2.token.revoked")
    assert (await me_status(server, theirs["accessToken"])).status == 200
    assert await listed_client_ids(server, s) == [t.client_id]

    listing = await session.follow(result)
    assert listing.status == 200 and urlsplit(listing.url).path == APPS
    assert "Moonbeam Notes" not in listing.text
    assert "Plaza Reader" in listing.text
    assert revoke_path(s.client_id) not in link_paths(listing)


async def test_revoking_without_the_xsrf_token_is_refused(server):
    s = await full_setup(server, name="Moonbeam Notes")
    tokens = await tokens_for(server, s)
    session, _ = await logged_in(server, s)
    page = await session.get(revoke_path(s.client_id))
    result = await session.submit(page, revoke_form(page, s.client_id), drop=["_xsrf"])
    assert 400 <= result.status < 500, (result.status, result.location)
    assert result.location is None
    assert (await me_status(server, tokens["accessToken"])).status == 200
    assert await listed_client_ids(server, s) == [s.client_id]


async def test_a_visitor_who_is_not_logged_in_cannot_revoke(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    stranger = PageSession(server)
    login_page = await stranger.get(APPS)  # gets an XSRF cookie and token of its own
    xsrf = login_page.login_form().hidden()["_xsrf"]
    result = await stranger.request("POST", revoke_path(s.client_id), form={"_xsrf": xsrf})
    assert not (result.status == 303 and urlsplit(result.location or "").path == APPS), result.status
    assert (await me_status(server, tokens["accessToken"])).status == 200
    assert await listed_client_ids(server, s) == [s.client_id]


async def test_a_user_cannot_revoke_another_users_grant(server):
    s = await full_setup(server, name="Moonbeam Notes")
    tokens = await tokens_for(server, s)
    other = await server.create_user()
    b = Setup(user=other, token=await server.login(other["email"], other["password"]), app=s.app)
    session, page = await logged_in(server, b)
    xsrf = next(f for f in page.forms if "_xsrf" in f.hidden()).hidden()["_xsrf"]

    confirm = await session.get(revoke_path(s.client_id))
    assert 400 <= confirm.status < 500 and revoke_form(confirm, s.client_id) is None, confirm.status
    result = await session.request("POST", revoke_path(s.client_id), form={"_xsrf": xsrf})
    assert 400 <= result.status < 500, (result.status, result.location)
    assert (await me_status(server, tokens["accessToken"])).status == 200
    assert await listed_client_ids(server, s) == [s.client_id]

"""The account pages (contract 16, with the page rules of contract 5): /account/ (profile and
password), /account/sessions (list, end one, end all others) and /account/delete (a confirmation
that asks for the password), driven over HTTP by a cookie-keeping browser (tests/flow_helpers).

What a user notices is checked through the API as well: a saved name is what apps read at
/api/auth/me, an ended session's token answers `oauth2.token.revoked`, a deleted account cannot
sign in.

Assumed markup (not fixed by the contract): each form is a POST whose action is its URL (below),
carrying Tornado's `_xsrf` hidden input; a refused field's message is the element `#<field>-error`,
which the field names in `aria-describedby`; a notice is `role="status"`; an error page names its
subCode."""

from __future__ import annotations

import base64
import html
import re
from urllib.parse import urlsplit

import pytest

from tests.conftest import start_server
from tests.flow_helpers import Form, Page, PageSession, Setup, full_setup, tokens_for
from tests.test_connected_apps import assert_page_headers, logged_in

ACCOUNT, SESSIONS, DELETE = "/account/", "/account/sessions", "/account/delete"
PROFILE_FORM, PASSWORD_FORM, END_OTHERS_FORM = "/account/profile", "/account/password", "/account/sessions/end-others"
NEW_PASSWORD = "a much longer passphrase 42"
PHONE_AGENT = "Mozilla/5.0 (Linux; Android 14; Pixel 8) lbauth-tests/1.0"


# ---- helpers -------------------------------------------------------------------------------------------

def end_form_path(session_id: str) -> str:
    return f"/account/sessions/{session_id}/end"


def form_to(page: Page, path: str) -> Form:
    """The page's POST form whose action is `path`."""
    for form in page.forms:
        action = urlsplit(form.action).path if form.action else urlsplit(page.url).path
        if form.method == "post" and action == path:
            return form
    raise AssertionError(f"no POST form to {path} on {page.url}: {page.text[:400]}")


def has_form_to(page: Page, path: str) -> bool:
    try:
        form_to(page, path)
    except AssertionError:
        return False
    return True


def field_error(page: Page, field: str) -> str | None:
    """The message beside `field` (`#field-error`), checked to be named by the field's aria-describedby."""
    body = page.response.text
    match = re.search(rf'<p[^>]*\bid="{re.escape(field)}-error"[^>]*>(.*?)</p>', body, re.S)
    if match is None:
        return None
    field_tag = re.search(rf'<(?:input|textarea)[^>]*\bid="{re.escape(field)}"[^>]*>', body)
    assert field_tag is not None, f"no field #{field}"
    assert f"{field}-error" in field_tag.group(0) and 'aria-invalid="true"' in field_tag.group(0), field_tag.group(0)
    return html.unescape(match.group(1)).strip()


def input_value(page: Page, name: str) -> str | None:
    for form in page.forms:
        for field in form.inputs:
            if field.get("name") == name:
                return field.get("value", "")
    return None


def textarea_value(page: Page, name: str) -> str | None:
    match = re.search(rf'<textarea[^>]*\bname="{re.escape(name)}"[^>]*>(.*?)</textarea>', page.response.text, re.S)
    return html.unescape(match.group(1)) if match else None


def notice(page: Page) -> str:
    match = re.search(r'<p[^>]*role="status"[^>]*>(.*?)</p>', page.response.text, re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", match.group(1))).split()) if match else ""


def assert_error_page(page: Page, status: int, sub_code: str) -> None:
    """An HTML error page (never a redirect) with this status, naming the subCode."""
    assert page.status == status, (page.status, page.location, page.text[:300])
    assert page.location is None
    assert page.response.headers.get("Content-Type", "").startswith("text/html"), page.response.headers
    assert sub_code in page.text, page.text[:400]
    assert_page_headers(page)


def landed_on(page: Page, path: str, **query: str) -> None:
    """A 303 to `path` on this server, with at least these query parameters."""
    assert page.status == 303, (page.status, page.text[:300])
    target = urlsplit(page.location)
    assert target.path == path and not target.netloc, page.location
    for name, value in query.items():
        assert f"{name}={value}" in target.query.split("&"), page.location


async def api_login(server, s: Setup, agent: str = PHONE_AGENT) -> str:
    """A user token from POST /api/auth/login, its session recorded with this User-Agent."""
    r = await server.client.post("/api/auth/login", json={"email": s.user["email"], "password": s.user["password"]},
                                 headers={"User-Agent": agent})
    assert r.status == 200, r.text
    return r.data["token"]


async def session_id_of(server, user_token: str) -> str:
    r = await server.client.get("/api/account/sessions", bearer=user_token)
    assert r.status == 200, r.text
    (mine,) = [item for item in r.data["items"] if item["current"]]
    return mine["sessionId"]


async def token_works(server, user_token: str) -> bool:
    r = await server.client.get("/api/account/sessions", bearer=user_token)
    if r.status == 200:
        return True
    r.assert_error(401, "oauth2.token.revoked")
    return False


async def sign_in_status(server, email: str, password: str) -> int:
    r = await server.client.post("/api/auth/login", json={"email": email, "password": password})
    return r.status


async def account_page(server, s: Setup, url: str = ACCOUNT) -> tuple[PageSession, Page]:
    session, page = await logged_in(server, s, url)
    assert_page_headers(page)
    return session, page


def copy_of(browser: PageSession) -> PageSession:
    """A second browser holding a copy of this one's cookies (a stolen cookie)."""
    thief = PageSession(browser.server)
    thief.cookies = dict(browser.cookies)
    return thief


# ---- every page needs a signed-in user -----------------------------------------------------------------

@pytest.mark.parametrize("path", [ACCOUNT, "/account", SESSIONS, DELETE])
async def test_each_account_page_shows_the_sign_in_form_then_comes_back(server, path):
    s = await full_setup(server)
    visitor = PageSession(server)
    first = await visitor.get(path)
    assert first.status == 200 and first.login_form() is not None, (first.status, first.text[:300])
    assert s.user["email"] not in first.text
    assert_page_headers(first)
    page = await visitor.log_in(first, s.user["email"], s.user["password"])
    assert page.status == 200, (page.status, page.location, page.text[:300])
    assert urlsplit(page.url).path == path
    assert page.login_form() is None or path == DELETE  # the deletion page asks for the password itself
    assert s.user["email"] in page.text


async def test_a_visitor_cannot_post_any_account_form(server):
    """A POST from a browser that is not signed in (with a good XSRF token of its own) changes
    nothing: it gets the sign-in form, with 401."""
    s = await full_setup(server)
    other_session = await session_id_of(server, s.token)
    visitor = PageSession(server)
    xsrf = (await visitor.get(ACCOUNT)).login_form().hidden()["_xsrf"]
    posts = {PROFILE_FORM: {"name": "Mallory"},
             PASSWORD_FORM: {"current_password": s.user["password"], "new_password": NEW_PASSWORD,
                             "confirm_password": NEW_PASSWORD},
             end_form_path(other_session): {}, END_OTHERS_FORM: {}, DELETE: {"password": s.user["password"]}}
    for path, fields in posts.items():
        page = await visitor.request("POST", path, form={"_xsrf": xsrf, **fields})
        assert page.status == 401 and page.login_form() is not None, (path, page.status, page.location)
        assert_page_headers(page)
    assert await token_works(server, s.token)
    assert (await server.client.get("/api/account/profile", bearer=s.token)).data["name"] == s.user["name"]
    assert await sign_in_status(server, s.user["email"], s.user["password"]) == 200


async def test_every_account_form_without_its_xsrf_token_is_refused(server):
    s = await full_setup(server)
    other = await api_login(server, s)
    other_id = await session_id_of(server, other)
    browser, page = await account_page(server, s)
    sessions_page = await browser.get(SESSIONS)
    delete_page = await browser.get(DELETE)
    forms = [(page, PROFILE_FORM, {"name": "Mallory"}),
             (page, PASSWORD_FORM, {"current_password": s.user["password"], "new_password": NEW_PASSWORD,
                                    "confirm_password": NEW_PASSWORD}),
             (sessions_page, end_form_path(other_id), {}), (sessions_page, END_OTHERS_FORM, {}),
             (delete_page, DELETE, {"password": s.user["password"]})]
    for where, path, fields in forms:
        refused = await browser.submit(where, form_to(where, path), fields, drop=["_xsrf"])
        assert_error_page(refused, 403, "request.xsrf_failed")
    assert await token_works(server, other)
    assert await token_works(server, s.token)
    assert (await server.client.get("/api/account/profile", bearer=s.token)).data["name"] == s.user["name"]
    assert await sign_in_status(server, s.user["email"], s.user["password"]) == 200
    assert (await browser.get(ACCOUNT)).login_form() is None  # still signed in


# ---- the profile ---------------------------------------------------------------------------------------

async def test_a_saved_profile_shows_on_the_page_and_to_apps(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s, ["userinfo"])  # issued before the edit
    browser, page = await account_page(server, s)
    assert input_value(page, "name") == s.user["name"]

    saved = await browser.submit(page, form_to(page, PROFILE_FORM),
                                 {"name": "Ada Lovelace", "avatar": "https://img.example/ada.png",
                                  "bio": "Analyst of engines <&>", "interest_tags": " maths, poetry ,, engines "})
    landed_on(saved, ACCOUNT, saved="profile")
    page = await browser.follow(saved)
    assert page.status == 200
    assert "saved" in notice(page).lower(), page.text[:400]
    assert input_value(page, "name") == "Ada Lovelace"
    assert input_value(page, "avatar") == "https://img.example/ada.png"
    assert textarea_value(page, "bio") == "Analyst of engines <&>"
    assert input_value(page, "interest_tags") == "maths, poetry, engines"

    me = await server.client.get("/api/auth/me", bearer=tokens["accessToken"])
    assert me.data["name"] == "Ada Lovelace" and me.data["bio"] == "Analyst of engines <&>", me.text
    info = await server.client.get("/api/service/user/info", bearer=tokens["accessToken"])
    assert info.data["interestTags"] == ["maths", "poetry", "engines"], info.text
    assert info.data["avatar"] == "https://img.example/ada.png"


async def test_a_profile_field_left_out_of_the_form_is_kept(server):
    s = await full_setup(server)
    browser, page = await account_page(server, s)
    xsrf = form_to(page, PROFILE_FORM).hidden()["_xsrf"]
    saved = await browser.request("POST", PROFILE_FORM, form={"_xsrf": xsrf, "bio": "Only the bio"})
    landed_on(saved, ACCOUNT, saved="profile")
    profile = (await server.client.get("/api/account/profile", bearer=s.token)).data
    assert profile["bio"] == "Only the bio" and profile["name"] == s.user["name"], profile


@pytest.mark.parametrize("field,typed", [("name", "   "), ("avatar", "javascript:alert(1)"), ("bio", "b" * 2001),
                                         ("interest_tags", ", ".join(f"tag{i}" for i in range(21))),
                                         ("interest_tags", "ok, " + "x" * 41)])
async def test_a_refused_profile_says_why_beside_the_field_and_keeps_what_was_typed(server, field, typed):
    s = await full_setup(server)
    browser, page = await account_page(server, s)
    fields = {"name": "Kept Name", "avatar": "", "bio": "Kept bio", "interest_tags": "kept, tags", field: typed}
    refused = await browser.submit(page, form_to(page, PROFILE_FORM), fields)
    assert refused.status == 400, (refused.status, refused.location)
    assert_page_headers(refused)
    message = field_error(refused, field)
    assert message, refused.text[:600]
    assert [f for f in fields if f != field and field_error(refused, f)] == []
    for name, value in fields.items():
        shown = textarea_value(refused, name) if name == "bio" else input_value(refused, name)
        assert shown == value, (name, shown, value)
    profile = (await server.client.get("/api/account/profile", bearer=s.token)).data
    assert profile["name"] == s.user["name"] and profile["bio"] == "", profile


async def test_the_profile_page_escapes_what_the_user_typed(server):
    s = await full_setup(server)
    browser, page = await account_page(server, s)
    name = '<script>alert("x")</script>"><b>'
    page = await browser.follow(await browser.submit(page, form_to(page, PROFILE_FORM), {"name": name}))
    assert input_value(page, "name") == name
    assert "<script>alert" not in page.response.text


# ---- the password ----------------------------------------------------------------------------------------

def password_fields(current: str, new: str, confirm: str | None = None) -> dict[str, str]:
    return {"current_password": current, "new_password": new,
            "confirm_password": new if confirm is None else confirm}


@pytest.mark.parametrize("case", ["wrong-current", "weak", "equal-to-email", "holds-name", "breached", "mismatch"])
async def test_a_refused_password_change_says_why_and_changes_nothing(server, case):
    s = await full_setup(server)
    other = await api_login(server, s)
    browser, page = await account_page(server, s)
    current = s.user["password"]
    fields, status, field, sub_text = {
        "wrong-current": (password_fields("not my password", NEW_PASSWORD), 401, "current_password", "wrong"),
        "weak": (password_fields(current, "short1"), 400, "new_password", "10 characters"),
        "equal-to-email": (password_fields(current, s.user["email"]), 400, "new_password", "email"),
        "holds-name": (password_fields(current, "testing one two"), 400, "new_password", "your name"),  # Test User
        "breached": (password_fields(current, "qwertyuiop"), 400, "new_password", "data breaches"),
        "mismatch": (password_fields(current, NEW_PASSWORD, NEW_PASSWORD + "!"), 400, "confirm_password", "same"),
    }[case]
    refused = await browser.submit(page, form_to(page, PASSWORD_FORM), fields)
    assert refused.status == status, (refused.status, refused.location, refused.text[:300])
    assert_page_headers(refused)
    message = field_error(refused, field)
    assert message and sub_text in message, (message, refused.text[:600])
    for typed in fields.values():  # no password goes back into the page
        assert f'value="{html.escape(typed)}"' not in refused.response.text
        assert typed not in refused.response.text or typed == s.user["email"]
    assert has_form_to(refused, PROFILE_FORM) and has_form_to(refused, PASSWORD_FORM)
    assert await token_works(server, other)
    assert await sign_in_status(server, s.user["email"], current) == 200


async def test_a_password_change_ends_every_other_session(server):
    s = await full_setup(server)
    first, second = await api_login(server, s), await api_login(server, s, "curl/8.5.0")
    other_browser, _ = await account_page(server, s)
    browser, page = await account_page(server, s)

    changed = await browser.submit(page, form_to(page, PASSWORD_FORM), password_fields(s.user["password"],
                                                                                       NEW_PASSWORD))
    landed_on(changed, ACCOUNT, saved="password")
    page = await browser.follow(changed)
    assert page.status == 200 and page.login_form() is None
    said = notice(page)
    # s.token (full_setup's login), two API logins and the other browser: four other sessions
    assert "Password changed" in said and "4 other sessions were ended" in said, said

    for token in (s.token, first, second):
        (await server.client.get("/api/account/sessions", bearer=token)).assert_error(401, "oauth2.token.revoked")
    assert (await other_browser.get(ACCOUNT)).login_form() is not None
    assert (await browser.get(SESSIONS)).login_form() is None  # this browser stays signed in
    assert await sign_in_status(server, s.user["email"], s.user["password"]) == 401
    assert await sign_in_status(server, s.user["email"], NEW_PASSWORD) == 200


async def test_password_changes_from_the_page_are_rate_limited_like_sign_in(tmp_path, database_url):
    server = await start_server(tmp_path, database_url, rate_limits="login-account=3/60")
    try:
        user = await server.create_user()
        s = Setup(user=user, token="", app={})
        browser, page = await account_page(server, s)
        statuses = []
        for _ in range(3):  # the sign-in above counted once
            refused = await browser.submit(page, form_to(page, PASSWORD_FORM),
                                           password_fields("not my password", NEW_PASSWORD))
            statuses.append(refused.status)
        assert statuses == [401, 401, 429], statuses
        assert refused.response.headers.get("Retry-After"), refused.response.headers
        assert "request.rate_limited" in refused.text
    finally:
        server.client.close()
        await server.running.stop()


# ---- sessions --------------------------------------------------------------------------------------------

def session_block(page: Page, session_id: str) -> str:
    """The visible text of one session's entry in the list (the <li> holding its End form)."""
    body = page.response.text
    end = body.find(f'action="{end_form_path(session_id)}"')
    assert end != -1, f"{session_id} is not listed"
    start = body.rfind("<li", 0, end)
    stop = body.find("</li>", end)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", body[start:stop])).split())


async def test_the_sessions_page_lists_api_tokens_and_marks_this_browser(server):
    s = await full_setup(server)
    token = await api_login(server, s)
    api_id = await session_id_of(server, token)
    browser, page = await account_page(server, s, SESSIONS)
    listed = (await server.client.get("/api/account/sessions", bearer=token)).data["items"]
    assert len(listed) == 3  # full_setup's token, this API login, this browser
    (mine,) = [item for item in listed if item["kind"] == "browser"]

    api_entry = session_block(page, api_id)
    # The device in words, as the activity page says it (contract 21); the raw header in its title.
    assert "API token" in api_entry and "127.0.0.1" in api_entry, api_entry
    assert "Unknown browser on Android" in api_entry, api_entry
    assert f'title="{PHONE_AGENT}"' in page.response.text
    assert "This browser" not in api_entry
    created = listed[[i["sessionId"] for i in listed].index(api_id)]["createdAt"]
    assert created[:10] in api_entry and created[11:16] in api_entry, (created, api_entry)
    browser_entry = session_block(page, mine["sessionId"])
    assert "Browser" in browser_entry and "This browser" in browser_entry, browser_entry
    assert page.text.count("This browser") == 1
    assert has_form_to(page, END_OTHERS_FORM)
    assert "_xsrf" in form_to(page, end_form_path(api_id)).hidden()


async def test_ending_another_session_signs_it_out(server):
    s = await full_setup(server)
    token = await api_login(server, s)
    api_id = await session_id_of(server, token)
    browser, page = await account_page(server, s, SESSIONS)

    ended = await browser.submit(page, form_to(page, end_form_path(api_id)))
    landed_on(ended, SESSIONS, ended="one")
    (await server.client.get("/api/account/sessions", bearer=token)).assert_error(401, "oauth2.token.revoked")
    page = await browser.follow(ended)
    assert page.status == 200 and "ended" in notice(page).lower(), page.text[:300]
    assert not has_form_to(page, end_form_path(api_id))
    assert await token_works(server, s.token)  # the other sessions go on


async def test_ending_another_users_session_is_not_found(server):
    """Another user's session id, a made-up one and an ended one of the user's own answer the
    same 404 page: the page never hints that a session exists."""
    s = await full_setup(server)
    stranger = await server.create_user()
    theirs = await server.login(stranger["email"], stranger["password"])
    their_id = await session_id_of(server, theirs)
    gone = await api_login(server, s)
    gone_id = await session_id_of(server, gone)
    await server.client.post("/api/auth/logout", bearer=gone)
    browser, page = await account_page(server, s, SESSIONS)
    xsrf = form_to(page, END_OTHERS_FORM).hidden()["_xsrf"]

    answers = []
    for session_id in (their_id, "ses_made_up_0000000000", gone_id):
        refused = await browser.request("POST", end_form_path(session_id), form={"_xsrf": xsrf})
        assert_error_page(refused, 404, "auth.session.not_found")
        answers.append(refused.text)
    assert answers[0] == answers[1] == answers[2]
    assert await token_works(server, theirs)
    assert (await browser.get(SESSIONS)).login_form() is None


async def test_end_all_other_sessions_keeps_only_this_browser(server):
    s = await full_setup(server)
    token = await api_login(server, s)
    other_browser, _ = await account_page(server, s)
    browser, page = await account_page(server, s, SESSIONS)

    ended = await browser.submit(page, form_to(page, END_OTHERS_FORM))
    landed_on(ended, SESSIONS, ended="others", count="3")
    page = await browser.follow(ended)
    assert "3 other sessions ended" in notice(page), notice(page)
    for t in (s.token, token):
        (await server.client.get("/api/account/sessions", bearer=t)).assert_error(401, "oauth2.token.revoked")
    assert (await other_browser.get(SESSIONS)).login_form() is not None
    assert page.text.count("This browser") == 1 and not has_form_to(page, END_OTHERS_FORM)
    assert len(re.findall(r'action="/account/sessions/[^"/]+/end"', page.response.text)) == 1


async def test_ending_this_browsers_own_session_signs_it_out(server):
    s = await full_setup(server)
    browser, page = await account_page(server, s, SESSIONS)
    thief = copy_of(browser)
    (mine,) = [item for item in (await server.client.get("/api/account/sessions", bearer=s.token)).data["items"]
               if item["kind"] == "browser"]

    ended = await browser.submit(page, form_to(page, end_form_path(mine["sessionId"])))
    assert ended.status == 303 and urlsplit(ended.location).path == "/login", (ended.status, ended.location)
    assert "lbauth_session" not in browser.cookies
    assert (await browser.get(SESSIONS)).login_form() is not None
    assert (await thief.get(SESSIONS)).login_form() is not None  # a copy of the cookie is worth nothing
    assert await token_works(server, s.token)


# ---- deleting the account ----------------------------------------------------------------------------------

async def test_the_deletion_page_explains_and_deletes_nothing(server):
    s = await full_setup(server, name="Moonbeam Notes")
    await tokens_for(server, s)
    browser, page = await account_page(server, s, DELETE)
    text = page.text.lower()
    for words in ("cannot be undone", "moonbeam notes", "loses access", "told", "session", "erased"):
        assert words in text, (words, page.text)
    form = form_to(page, DELETE)
    assert "_xsrf" in form.hidden() and form.has_input("password")
    assert await token_works(server, s.token)


async def test_deleting_with_a_wrong_password_keeps_the_account(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    browser, page = await account_page(server, s, DELETE)
    refused = await browser.submit(page, form_to(page, DELETE), {"password": "not my password"})
    assert refused.status == 401, (refused.status, refused.location)
    assert_page_headers(refused)
    assert "wrong" in (field_error(refused, "password") or ""), refused.text[:500]
    assert "not my password" not in refused.response.text
    assert has_form_to(refused, DELETE)
    assert await token_works(server, s.token)
    assert (await server.client.get("/api/auth/me", bearer=tokens["accessToken"])).status == 200
    assert await sign_in_status(server, s.user["email"], s.user["password"]) == 200
    assert (await browser.get(ACCOUNT)).login_form() is None


async def test_deleting_with_the_password_erases_the_account_and_signs_out_everywhere(server):
    s = await full_setup(server, name="Moonbeam Notes")
    tokens = await tokens_for(server, s)
    browser, page = await account_page(server, s, DELETE)
    thief = copy_of(browser)

    done = await browser.submit(page, form_to(page, DELETE), {"password": s.user["password"]})
    assert done.status == 200, (done.status, done.location, done.text[:300])
    assert_page_headers(done)
    assert "Your account has been deleted" in done.text
    assert s.user["email"] not in done.text and "Sign out" not in done.text
    assert "lbauth_session" not in browser.cookies

    (await server.client.post("/api/auth/login", json={"email": s.user["email"], "password": s.user["password"]})
     ).assert_error(401, "auth.login.failed")
    (await server.client.get("/api/account/sessions", bearer=s.token)).assert_error(401, "oauth2.token.revoked")
    (await server.client.get("/api/auth/me", bearer=tokens["accessToken"])).assert_error(401, "oauth2.token.revoked")
    for who in (browser, thief):
        again = await who.get(ACCOUNT)
        assert again.status == 200 and again.login_form() is not None, again.text[:300]


# ---- headers ---------------------------------------------------------------------------------------------

async def test_every_account_page_sends_the_page_headers(server):
    """Contract 5 on each page and each answer a form gets back, error pages included."""
    s = await full_setup(server)
    browser, page = await account_page(server, s)
    answers = [page, await browser.get("/account"), await browser.get(SESSIONS), await browser.get(DELETE),
               await browser.submit(page, form_to(page, PROFILE_FORM), {"name": ""}),
               await browser.submit(page, form_to(page, PASSWORD_FORM), password_fields("x", "y")),
               await browser.submit(page, form_to(page, PROFILE_FORM), {"name": "Fine"}),
               await browser.request("POST", end_form_path("ses_nope"),
                                     form={"_xsrf": form_to(page, PROFILE_FORM).hidden()["_xsrf"]})]
    for answer in answers:
        assert_page_headers(answer)
        csp = answer.response.headers["Content-Security-Policy"]
        assert "form-action 'self'" in csp and "script-src" not in csp, csp
        assert answer.response.headers.get("X-Content-Type-Options") == "nosniff"


async def test_the_account_pages_link_to_each_other(server):
    """From any account page a user reaches the others: Profile, Sessions, Connected apps, the
    deletion page from the profile, and Sign out (a POST form)."""
    from tests.test_connected_apps import link_paths
    s = await full_setup(server)
    browser, page = await account_page(server, s, "/account/apps")
    for path in ("/account/apps", ACCOUNT, SESSIONS, DELETE):
        page = await browser.get(path)
        links = link_paths(page)
        assert {ACCOUNT, SESSIONS, "/account/apps"} <= links, (path, links)
        assert has_form_to(page, "/logout"), path
    assert DELETE in link_paths(await browser.get(ACCOUNT))


async def test_the_browser_cookie_is_no_api_credential(server):
    """The session cookie names a browser session: the credential inside it (Tornado signs the
    cookie, it does not encrypt it) is refused by every user-token endpoint."""
    s = await full_setup(server)
    browser, _ = await account_page(server, s)
    signed = browser.cookies["lbauth_session"].value.strip('"')
    # Tornado's signed value, version 2: 2|1:0|10:<time>|14:lbauth_session|<n>:<base64 value>|<signature>
    inside = base64.b64decode(signed.split("|")[4].split(":", 1)[1]).decode()
    assert inside.startswith("lba_ut_")
    for path in ("/api/account/profile", "/api/account/sessions"):
        (await server.client.get(path, bearer=inside)).assert_error(401, "oauth2.token.invalid")
    (await server.client.post("/api/oauth/authorize/external", bearer=inside, json={
        "clientId": s.client_id, "redirectUri": s.redirect_uri, "scope": ["userinfo"]})).assert_error(
        401, "oauth2.token.invalid")
    assert (await browser.get(ACCOUNT)).login_form() is None  # and it still works where it belongs

"""A user's own account through the API (contract section 16), against the real server on both
databases: the sessions a user can see and end (API tokens and browser sign-ins), the profile, the
password, leaving, and what an operator's `lbauth users disable` / `enable` does to a user.

What is checked is what a user, an app or an operator would notice: a token that stops working
(and with which subCode), a list that shows or no longer shows something, a webhook that arrives,
a sign-in that fails. Time is moved with the server's clock, never slept."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from lbauth.clock import FrozenClock
from tests.account_helpers import (
    PROFILE_FIELDS,
    PROPAGATION_SECONDS,
    SESSION_FIELDS,
    assert_user_token_revoked,
    change_password,
    copy_of,
    current_session_id,
    delete_account,
    end_session,
    login_status,
    patch_profile,
    sessions_of,
    shows_sign_in_form,
    signed_in_browser,
)
from tests.conftest import START_TIME, arun_cli, running_server, start_server
from tests.flow_helpers import (
    REGISTERED_URI,
    PageSession,
    Setup,
    authorize,
    code_for,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    redirect_query,
    refresh,
    tokens_for,
)
from tests.revocation_helpers import (
    INVALID_TOKEN,
    assert_revoked_at_me,
    authorizations,
    feed,
    iso,
    me,
    other_user,
    second_app,
)
from tests.support import unverified_claims, wait_until


async def login_as(server, user: dict, user_agent: str | None = None, **more_headers: str) -> str:
    headers = {"User-Agent": user_agent, **more_headers} if user_agent is not None else None
    r = await server.client.post("/api/auth/login", json={"email": user["email"], "password": user["password"]},
                                 headers=headers)
    assert r.status == 200, r.text
    return r.data["token"]


# ---- GET /api/account/sessions ---------------------------------------------------------------------------

async def test_two_logins_are_two_api_sessions_with_their_details(server):
    user = await server.create_user()
    long_agent = "Mozilla/5.0 " + "x" * 288  # 300 characters: the list keeps the first 200
    first = await login_as(server, user, long_agent)
    server.clock.advance(45)
    # What a client says of its address is not believed: the list shows the TCP peer.
    second = await login_as(server, user, "curl/8.5.0", **{"X-Forwarded-For": "203.0.113.9",
                                                           "X-Real-Ip": "203.0.113.9"})

    items = await sessions_of(server, first)
    assert len(items) == 2
    for item in items:
        assert set(item) == SESSION_FIELDS, item
        assert re.fullmatch(r"ses_[A-Za-z0-9_\-]+", item["sessionId"]), item
        assert item["kind"] == "api" and item["ipAddress"] == "127.0.0.1"
        assert item["lastUsedAt"] == item["createdAt"]  # neither used a minute after its creation
    by_agent = {item["userAgent"]: item for item in items}
    assert set(by_agent) == {long_agent[:200], "curl/8.5.0"}
    assert by_agent[long_agent[:200]]["createdAt"] == iso(START_TIME)
    assert by_agent["curl/8.5.0"]["createdAt"] == iso(START_TIME + 45)
    # Exactly one is the caller's own, and it is the one this token opened.
    assert [item["userAgent"] for item in items if item["current"]] == [long_agent[:200]]
    from_second = await sessions_of(server, second)
    assert [item["userAgent"] for item in from_second if item["current"]] == ["curl/8.5.0"]
    assert {i["sessionId"] for i in from_second} == {i["sessionId"] for i in items}


async def test_another_users_sessions_are_not_listed(server):
    s = await full_setup(server)
    b = await other_user(server, s)
    mine = await sessions_of(server, s.token)
    theirs = await sessions_of(server, b.token)
    assert len(mine) == 1 and len(theirs) == 1 and mine[0]["sessionId"] != theirs[0]["sessionId"]


async def test_the_session_api_needs_a_user_token(server):
    s = await full_setup(server)
    access = (await tokens_for(server, s))["accessToken"]
    r = await server.client.get("/api/account/sessions")
    r.assert_error(401, "oauth2.token.missing")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    r = await server.client.get("/api/account/sessions", bearer=access)
    r.assert_error(401, "oauth2.token.invalid")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


async def test_last_used_moves_at_most_once_a_minute_and_a_use_within_it_writes_nothing(server):
    await server.quiet()  # count only this test's statements
    s = await full_setup(server)
    await code_for(server, s)  # a grant, so that the list below has something to read
    (created,) = await sessions_of(server, s.token)  # this process now knows the session

    async def listing_statements() -> int:
        before = server.db.statements
        assert len(await authorizations(server, s.token)) == 1
        return server.db.statements - before

    # Within the minute: the session is neither read nor written; the grants' read is all.
    assert await listing_statements() == 1
    server.clock.advance(30)
    assert await listing_statements() == 1
    (item,) = await sessions_of(server, s.token)
    assert item["lastUsedAt"] == created["lastUsedAt"] == iso(START_TIME)

    # Past the minute: one write records the use, then again nothing for a minute.
    server.clock.advance(31)
    assert await listing_statements() == 2
    (item,) = await sessions_of(server, s.token)
    assert item["lastUsedAt"] == iso(START_TIME + 61) and item["createdAt"] == iso(START_TIME)
    assert await listing_statements() == 1
    server.clock.advance(59)
    before = server.db.statements
    assert (await authorize(server, s.token, s.client_id, s.redirect_uri)).status == 200
    assert server.db.statements - before == 2  # the app, and the code: no session statement
    (item,) = await sessions_of(server, s.token)
    assert item["lastUsedAt"] == iso(START_TIME + 61)


async def test_an_expired_session_is_refused_and_no_longer_listed(server):
    user = await server.create_user()
    old = await server.login(user["email"], user["password"])
    server.clock.advance(100)
    recent = await server.login(user["email"], user["password"])
    server.clock.advance(server.settings.user_token_ttl - 50)  # past the first one's lifetime only
    r = await server.client.get("/api/account/sessions", bearer=old)
    r.assert_error(401, "oauth2.token.expired")
    (only,) = await sessions_of(server, recent)
    assert only["current"] is True and only["createdAt"] == iso(START_TIME + 100)


# ---- ending sessions ---------------------------------------------------------------------------------------

async def test_ending_another_of_my_sessions_refuses_its_token_at_once(server):
    s = await full_setup(server)
    stolen = await server.login(s.user["email"], s.user["password"])
    stolen_id = await current_session_id(server, stolen)  # this process has seen (and cached) it
    server.clock.advance(5)

    r = await end_session(server, s.token, stolen_id)
    assert r.status == 200, r.text
    assert r.data == {"sessionId": stolen_id, "endedAt": iso(START_TIME + 5)}

    await assert_user_token_revoked(server, stolen)
    r = await authorize(server, stolen, s.client_id, s.redirect_uri)
    r.assert_error(401, "oauth2.token.revoked")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN
    (left,) = await sessions_of(server, s.token)  # the caller's own goes on
    assert left["current"] is True and left["sessionId"] != stolen_id
    assert (await authorize(server, s.token, s.client_id, s.redirect_uri)).status == 200


async def test_a_use_recording_last_used_that_races_the_end_does_not_bring_the_session_back(server):
    """The first use after a minute writes lastUsedAt; when the session is ended while that write
    is under way, the ended session must not come back from what that request had read."""
    user = await server.create_user()
    keeper = await server.login(user["email"], user["password"])
    for _ in range(6):  # 30 races: the faulty order showed in about one in eight (PostgreSQL)
        tokens = [await server.login(user["email"], user["password"]) for _ in range(5)]
        ids = [await current_session_id(server, token) for token in tokens]  # each one cached
        server.clock.advance(61)  # each token's next use records it
        await sessions_of(server, keeper)  # (the keeper's own record, out of the way)
        answers = await asyncio.gather(*(end_session(server, keeper, i) for i in ids),
                                       *(server.client.get("/api/auth/authorizations", bearer=t) for t in tokens))
        assert all(r.status == 200 for r in answers[:len(ids)]), [r.text for r in answers]
        for token in tokens:
            await assert_user_token_revoked(server, token)


async def test_what_a_process_remembers_of_sessions_is_bounded_and_ending_one_still_works(server):
    """An operator's concern: a process that has seen many sessions does not keep something for
    each of them forever (here the bound is lowered to 3). A session it let go of is read again
    on its next use, and ending any of them is honoured at once."""
    sessions = server.services.accounts.sessions
    sessions.MAX_ENTRIES = 3
    user = await server.create_user()
    keeper = await server.login(user["email"], user["password"])
    tokens = [await server.login(user["email"], user["password"]) for _ in range(8)]
    ids = [await current_session_id(server, token) for token in tokens]  # this process sees each one
    assert len(sessions._credential_of) <= 3
    for token in tokens:  # all still work: the ones let go of are read again
        assert (await server.client.get("/api/auth/authorizations", bearer=token)).status == 200
    for token, session_id in zip(tokens, ids, strict=True):
        assert (await end_session(server, keeper, session_id)).status == 200
        await assert_user_token_revoked(server, token)
    assert len(sessions._credential_of) <= 3


async def test_ending_a_session_that_is_not_mine_or_is_gone_is_not_found(server):
    s = await full_setup(server)
    b = await other_user(server, s)
    theirs = await current_session_id(server, b.token)
    (await end_session(server, s.token, theirs)).assert_error(404, "auth.session.not_found")
    (await end_session(server, s.token, "ses_" + "A" * 43)).assert_error(404, "auth.session.not_found")

    other = await server.login(s.user["email"], s.user["password"])
    other_id = await current_session_id(server, other)
    assert (await end_session(server, s.token, other_id)).status == 200
    (await end_session(server, s.token, other_id)).assert_error(404, "auth.session.not_found")
    # The other user's session was never touched.
    assert [i["sessionId"] for i in await sessions_of(server, b.token)] == [theirs]
    assert (await authorize(server, b.token, s.client_id, s.redirect_uri)).status == 200


async def test_end_others_ends_every_session_but_the_callers(server):
    s = await full_setup(server)
    others = [await server.login(s.user["email"], s.user["password"]) for _ in range(2)]
    for token in others:
        await sessions_of(server, token)
    r = await server.client.post("/api/account/sessions/end-others", bearer=s.token)
    assert r.status == 200, r.text
    assert r.data == {"ended": 2}
    for token in others:
        await assert_user_token_revoked(server, token)
    (only,) = await sessions_of(server, s.token)
    assert only["current"] is True
    r = await server.client.post("/api/account/sessions/end-others", bearer=s.token)
    assert r.status == 200 and r.data == {"ended": 0}


async def test_logout_ends_the_callers_own_session(server):
    s = await full_setup(server)
    other = await server.login(s.user["email"], s.user["password"])
    mine = await current_session_id(server, s.token)
    server.clock.advance(7)
    r = await server.client.post("/api/auth/logout", bearer=s.token)
    assert r.status == 200, r.text
    assert r.data == {"sessionId": mine, "endedAt": iso(START_TIME + 7)}
    await assert_user_token_revoked(server, s.token)
    (await authorize(server, s.token, s.client_id, s.redirect_uri)).assert_error(401, "oauth2.token.revoked")
    (await server.client.post("/api/auth/logout", bearer=s.token)).assert_error(401, "oauth2.token.revoked")
    assert [i["current"] for i in await sessions_of(server, other)] == [True]


# ---- browser sessions --------------------------------------------------------------------------------------

async def test_a_browser_sign_in_is_listed_and_ending_it_stops_a_copied_cookie(server):
    s = await full_setup(server)
    browser, _ = await signed_in_browser(server, s.user["email"], s.user["password"])
    thief = copy_of(browser)
    assert not await shows_sign_in_form(thief)  # the copy works, as long as the session lives

    items = await sessions_of(server, s.token)
    (web,) = [i for i in items if i["kind"] == "browser"]
    assert set(web) == SESSION_FIELDS and web["current"] is False and web["ipAddress"] == "127.0.0.1"
    assert web["createdAt"] == iso(START_TIME)

    assert (await end_session(server, s.token, web["sessionId"])).status == 200
    assert await shows_sign_in_form(thief)
    assert await shows_sign_in_form(browser)
    assert [i["kind"] for i in await sessions_of(server, s.token)] == ["api"]


async def test_signing_out_in_the_browser_ends_the_session_on_the_server(server):
    s = await full_setup(server)
    browser, page = await signed_in_browser(server, s.user["email"], s.user["password"])
    copied = copy_of(browser)  # taken before signing out
    sign_out = next(f for f in page.forms if f.action == "/logout")
    out = await browser.submit(page, sign_out)
    assert out.status == 303 and out.location == "/login"
    assert await shows_sign_in_form(browser)
    assert await shows_sign_in_form(copied)  # the server ended it: the copy does not work either
    assert [i["kind"] for i in await sessions_of(server, s.token)] == ["api"]


# ---- the profile -------------------------------------------------------------------------------------------

async def test_profile_shows_the_account(server):
    user = await server.create_user(name="Ada Lovelace", bio="engines", interest_tags=["math", "poetry"],
                                    avatar="https://img.example/ada.png")
    token = await server.login(user["email"], user["password"])
    r = await server.client.get("/api/account/profile", bearer=token)
    assert r.status == 200, r.text
    assert r.data == {"userId": user["userId"], "email": user["email"], "name": "Ada Lovelace",
                      "avatar": "https://img.example/ada.png", "bio": "engines", "interestTags": ["math", "poetry"],
                      "createdAt": iso(START_TIME), "emailVerified": False}


async def test_a_profile_edit_is_seen_at_once_by_me_and_user_info(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)  # issued before the edit
    assert (await me(server, tokens["accessToken"])).data["name"] == "Test User"  # this process caches the user
    info = await server.client.get("/api/service/user/info", bearer=tokens["accessToken"])
    assert info.data["interestTags"] == []

    edit = {"name": "Grace Hopper", "avatar": "https://img.example/grace.png", "bio": "compilers",
            "interestTags": ["cobol", "navy"]}
    r = await patch_profile(server, s.token, edit)
    assert r.status == 200, r.text
    assert set(r.data) == PROFILE_FIELDS and {k: r.data[k] for k in edit} == edit

    shown = (await me(server, tokens["accessToken"])).data
    assert (shown["name"], shown["avatar"], shown["bio"]) == ("Grace Hopper", "https://img.example/grace.png",
                                                              "compilers")
    info = (await server.client.get("/api/service/user/info", bearer=tokens["accessToken"])).data
    assert {k: info[k] for k in edit} == edit and info["email"] == s.user["email"]
    assert {k: v for k, v in (await server.client.get("/api/account/profile", bearer=s.token)).data.items()
            if k in edit} == edit

    # A partial edit changes only what it names.
    r = await patch_profile(server, s.token, {"bio": "rear admiral"})
    assert r.status == 200 and r.data["name"] == "Grace Hopper" and r.data["interestTags"] == ["cobol", "navy"]
    assert (await me(server, tokens["accessToken"])).data["bio"] == "rear admiral"


@pytest.mark.parametrize("body", [
    {"name": ""},
    {"name": "   "},
    {"avatar": "not a url"},
    {"avatar": "javascript:alert(1)"},
    {"interestTags": "music"},
    {"interestTags": ["ok", 5]},
    {"email": "someone.else@example.com"},
    {"name": "Fine", "userId": "usr_other"},
    ["name", "Fine"],
], ids=["empty-name", "blank-name", "avatar-not-url", "avatar-javascript", "tags-not-list", "tag-not-text",
        "email", "user-id", "not-an-object"])
async def test_invalid_profile_edits_are_validation_failed_and_change_nothing(server, body):
    s = await full_setup(server)
    before = (await server.client.get("/api/account/profile", bearer=s.token)).data
    (await patch_profile(server, s.token, body)).assert_error(400, "request.validation_failed")
    assert (await server.client.get("/api/account/profile", bearer=s.token)).data == before


# ---- the password ------------------------------------------------------------------------------------------

async def test_a_wrong_current_password_is_login_failed(server):
    s = await full_setup(server)
    (await change_password(server, s.token, "not my password", "a brand new password")).assert_error(
        401, "auth.login.failed")
    assert (await login_status(server, s.user["email"], s.user["password"])).status == 200


async def test_a_weak_new_password_is_refused_and_nothing_changes(server):
    s = await full_setup(server)
    other = await server.login(s.user["email"], s.user["password"])
    for weak, reason in (("ninechars", "at least 10 characters"), ("x" * 257, "at most 256 characters"),
                         (s.user["email"].upper(), "email"), (s.user["email"].title(), "email")):
        refused = await change_password(server, s.token, s.user["password"], weak)
        refused.assert_error(400, "account.password.weak")
        assert reason in refused.json["message"], refused.json
        (await login_status(server, s.user["email"], weak)).assert_error(401, "auth.login.failed")
    assert len(await sessions_of(server, other)) == 2  # no session was ended
    assert (await login_status(server, s.user["email"], s.user["password"])).status == 200


async def test_changing_the_password_ends_every_other_session(server):
    s = await full_setup(server)
    others = [await server.login(s.user["email"], s.user["password"]) for _ in range(2)]
    browser, _ = await signed_in_browser(server, s.user["email"], s.user["password"])
    for token in others:
        await sessions_of(server, token)

    r = await change_password(server, s.token, s.user["password"], "a brand new password")
    assert r.status == 200, r.text
    assert r.data == {"endedSessions": 3}
    for token in others:
        await assert_user_token_revoked(server, token)
    assert await shows_sign_in_form(browser)
    assert [i["current"] for i in await sessions_of(server, s.token)] == [True]  # the caller's goes on
    (await login_status(server, s.user["email"], s.user["password"])).assert_error(401, "auth.login.failed")
    assert (await login_status(server, s.user["email"], "a brand new password")).status == 200


@pytest.fixture
async def limited(tmp_path, database_url):
    async with running_server(tmp_path, database_url, rate_limits="login-account=3/60,login-address=50/60") as srv:
        yield srv


async def test_password_changes_are_rate_limited_like_sign_in(limited):
    """The sign-in itself is one try on the account; two wrong current passwords make three;
    the fourth try is refused whatever it holds, and comes back once the window has passed."""
    user = await limited.create_user()
    token = await limited.login(user["email"], user["password"])
    for _ in range(2):
        (await change_password(limited, token, "a wrong guess", "a brand new password")).assert_error(
            401, "auth.login.failed")
    refused = await change_password(limited, token, user["password"], "a brand new password")
    refused.assert_error(429, "request.rate_limited")
    retry_after = int(refused.headers["Retry-After"])
    assert 1 <= retry_after <= 60
    (await delete_account(limited, token, user["password"])).assert_error(429, "request.rate_limited")
    limited.clock.advance(retry_after)
    r = await change_password(limited, token, user["password"], "a brand new password")
    assert r.status == 200, r.text


# ---- leaving: DELETE /api/account --------------------------------------------------------------------------

@pytest.fixture
async def hooked(tmp_path, database_url):
    """A server that may deliver webhooks to a loopback receiver (development)."""
    srv = await start_server(tmp_path, database_url, env="development", webhook_timeout=1)
    yield srv
    srv.client.close()
    await srv.running.stop()


async def test_deleting_with_a_wrong_password_changes_nothing(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    (await delete_account(server, s.token, "not my password")).assert_error(401, "auth.login.failed")
    r = await server.client.request("DELETE", "/api/account", json_body={}, bearer=s.token)
    r.assert_error(400, "request.validation_failed")
    assert (await me(server, tokens["accessToken"])).status == 200
    assert (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)).status == 200
    assert len(await authorizations(server, s.token)) == 1
    assert (await login_status(server, s.user["email"], s.user["password"])).status == 200


async def test_deleting_the_account_revokes_everything_and_frees_the_email(hooked, receiver, database_url):
    server = hooked
    s = await full_setup(server, name="Hooked One", webhook_url=receiver.url)
    t = await second_app(server, s)
    quiet_app = await server.create_app(s.user["email"], name="No Hook", redirect_uris=[s.redirect_uri])
    hooked_two = await server.create_app(s.user["email"], name="Hooked Two", redirect_uris=[s.redirect_uri],
                                         webhook_url=receiver.url)
    setups = [s, t, Setup(s.user, s.token, quiet_app), Setup(s.user, s.token, hooked_two)]
    issued = [await tokens_for(server, each) for each in setups]
    asus = {each.app["appId"]: (await me(server, tokens["accessToken"])).data["appScopedUserId"]
            for each, tokens in zip(setups, issued, strict=True)}
    other_session = await server.login(s.user["email"], s.user["password"])
    open_code = await code_for(server, s)
    browser, _ = await signed_in_browser(server, s.user["email"], s.user["password"])
    server.clock.advance(11)

    r = await delete_account(server, s.token, s.user["password"])
    assert r.status == 200, r.text
    assert r.data == {"userId": s.user["userId"], "status": "deleted", "deletedAt": iso(START_TIME + 11),
                      "revokedAuthorizations": 4}

    # Every app with a webhook hears of it, as if the user had revoked it.
    await server.running.deliverer.flush()
    received = {hook.payload["appId"]: hook.payload for hook in receiver.received}
    assert set(received) == {s.app["appId"], hooked_two["appId"]}
    for app_id, payload in received.items():
        assert payload["eventType"] == "authorization.revoked" and payload["reason"] == "user_revoked"
        assert payload["appScopedUserId"] == asus[app_id]
    assert len(receiver.received) == 2

    # Nothing issued to the account works any more.
    for each, tokens in zip(setups, issued, strict=True):
        await assert_revoked_at_me(server, tokens["accessToken"])
        (await refresh(server, tokens["refreshToken"], each.client_id, each.client_secret)).assert_error(
            400, "oauth2.refresh_token.revoked")
    (await exchange(server, open_code, s.redirect_uri, s.client_id, s.client_secret)).assert_error(
        400, "oauth2.code.invalid")
    for token in (s.token, other_session):
        await assert_user_token_revoked(server, token)
    assert await shows_sign_in_form(browser)
    (await login_status(server, s.user["email"], s.user["password"])).assert_error(401, "auth.login.failed")

    # Offline verifiers learn it from the feed, which names the grants and nothing of the person.
    published = await feed(server)
    grant_ids = {unverified_claims(tokens["accessToken"])["gid"] for tokens in issued}
    assert grant_ids <= {item.get("grantId") for item in published.data["items"]}
    assert "ses_" not in published.text and s.user["userId"] not in published.text
    assert "usr_" not in published.text and s.user["email"] not in published.text

    # The email is free again.
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
    created = await arun_cli("users", "create", "--email", s.user["email"], "--name", "Someone New",
                             "--password", "another password", "--json", env=env)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["userId"] != s.user["userId"]


async def test_a_deleted_accounts_profile_is_gone_from_the_api(server):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    assert (await delete_account(server, s.token, s.user["password"])).status == 200
    (await server.client.get("/api/account/profile", bearer=s.token)).assert_error(401, "oauth2.token.revoked")
    (await server.client.get("/api/service/user/info", bearer=tokens["accessToken"])).assert_error(
        401, "oauth2.token.revoked")
    (await delete_account(server, s.token, s.user["password"])).assert_error(401, "oauth2.token.revoked")


# ---- an operator disables an account (lbauth users disable / enable) ---------------------------------------

async def test_a_disabled_user_is_refused_and_after_enable_signs_in_again_keeping_grants(tmp_path, database_url):
    # The CLI writes with the real clock: the server's runs from now, so they agree on what is recent.
    server = await start_server(tmp_path, database_url, clock=FrozenClock(time.time()))
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
    try:
        s = await full_setup(server)
        tokens = await tokens_for(server, s)
        granted = await authorizations(server, s.token)
        assert (await me(server, tokens["accessToken"])).status == 200
        open_code = await code_for(server, s)
        browser, _ = await signed_in_browser(server, s.user["email"], s.user["password"])

        result = await arun_cli("users", "disable", s.user["email"], "--json", env=env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"userId": s.user["userId"], "email": s.user["email"],
                                             "status": "disabled"}

        async def refused_at_me() -> bool:
            r = await me(server, tokens["accessToken"])
            return r.status == 401 and r.json["subCode"] == "oauth2.token.revoked"
        await wait_until(refused_at_me, PROPAGATION_SECONDS)
        (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)).assert_error(
            400, "oauth2.refresh_token.revoked")
        (await login_status(server, s.user["email"], s.user["password"])).assert_error(401, "auth.login.failed")
        r = await authorize(server, s.token, s.client_id, s.redirect_uri)
        r.assert_error(401, "oauth2.token.revoked")
        r = await exchange(server, open_code, s.redirect_uri, s.client_id, s.client_secret)
        assert r.status == 400 and r.json["subCode"].startswith("oauth2.code."), r.text
        assert await shows_sign_in_form(browser)
        page = await browser.log_in(await browser.get("/account/apps"), s.user["email"], s.user["password"])
        assert page.status == 401 and page.login_form() is not None  # the sign-in form again: refused

        result = await arun_cli("users", "enable", s.user["email"], "--json", env=env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout) == {"userId": s.user["userId"], "email": s.user["email"],
                                             "status": "enabled"}
        server.clock.set(int(time.time()) + 2)  # what is issued from now on is newer than the disable

        # What was issued before the disable stays refused.
        await assert_revoked_at_me(server, tokens["accessToken"])
        (await refresh(server, tokens["refreshToken"], s.client_id, s.client_secret)).assert_error(
            400, "oauth2.refresh_token.revoked")
        await assert_user_token_revoked(server, s.token)

        # A fresh sign-in works, and the grant is still there: no new consent.
        fresh = await server.login(s.user["email"], s.user["password"])
        assert await authorizations(server, fresh) == granted
        code = (await authorize(server, fresh, s.client_id, s.redirect_uri)).data["code"]
        new = (await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)).data

        async def works_at_me() -> bool:
            return (await me(server, new["accessToken"])).status == 200
        await wait_until(works_at_me, PROPAGATION_SECONDS)
        browser = PageSession(server)
        page = await browser.open_logged_in(oauth_url(front_params(s.client_id, REGISTERED_URI, state="back")),
                                            s.user["email"], s.user["password"])
        query = redirect_query(page.location or "", REGISTERED_URI)  # straight back to the app: no consent page
        assert query["state"] == ["back"] and query["code"][0].startswith("lba_ac_")
    finally:
        server.client.close()
        await server.running.stop()

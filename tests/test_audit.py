"""The audit log (contract 21), on both databases: every event type produced by a real flow (HTTP,
the pages, the command line, the maintainers' tools) and read back through GET /api/account/activity
and `lbauth audit list --json`; the activity page in Chromium; paging; failed sign-ins past the rate
limit write nothing; a SIGKILL between a change and its answer leaves both the change and its event
or neither; retention by the injected clock; a deleted user's events keep no email, address or user
agent in the bytes at rest.
"""

from __future__ import annotations

import asyncio
import getpass
import json
import re
import secrets
import sys
import time
from typing import Any

import pytest
from sqlalchemy import text
from tornado.httpclient import HTTPClientError

from lbauth.core.audit import EventType, describe_agent
from lbauth.core.audit import log as audit_log
from tests.account_helpers import change_password, delete_account, end_session, sessions_of
from tests.conftest import ROOT, START_TIME, TestServer, arun_cli, running_server
from tests.flow_helpers import REGISTERED_URI, PageSession, authorize, full_setup
from tests.mailbox import link_in
from tests.processes import ServerProcess
from tests.support import wait_until
from tests.test_client_metadata_documents import consent, dev, document, site  # noqa: F401 (fixtures)
from tests.test_device_grant import answer, started
from tests.test_key_rotation import atool
from tests.test_passkeys import (
    add_passkey,
    device,
    local_server,  # noqa: F401 (a fixture)
    passkey_sign_in,
    password_step,
    sign_in_with_password,
    sign_out,
    without_autofill,
)
from tests.test_public_clients import GRACE, public_setup, public_tokens, refreshed
from tests.test_second_factors import enrolled, oathtool, requires_oathtool, second_step
from tests.test_second_factors import password_step as api_password_step
from tests.test_secrets_at_rest import _bytes_at_rest
from tests.test_signup_recovery import (  # noqa: F401 (mail_server: a fixture)
    NEW_PASSWORD,
    PASSWORD,
    mail_server,
    reset,
    reset_link,
    sign_up,
    token_of,
)

CHROME_LINUX = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
FIREFOX_MAC = "Mozilla/5.0 (Macintosh; Intel Mac OS X 14.5; rv:133.0) Gecko/20100101 Firefox/133.0"
SAFARI_IPHONE = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
                 "Version/17.5 Mobile/15E148 Safari/604.1")
OPERATOR = {"type": "operator", "id": getpass.getuser()}
FIELDS = {"eventId", "occurredAt", "type", "actor", "userId", "ipAddress", "userAgent", "outcome", "detail",
          "description"}


# ---- reading the log back --------------------------------------------------------------------------------

async def activity(server: Any, token: str, **query: Any) -> list[dict]:
    """Every event of GET /api/account/activity, newest first, following `nextCursor` to the end."""
    items: list[dict] = []
    cursor = None
    while True:
        params = "&".join(f"{k}={v}" for k, v in {**query, **({"cursor": cursor} if cursor else {})}.items())
        r = await server.client.get("/api/account/activity" + (f"?{params}" if params else ""), bearer=token)
        assert r.status == 200, r.text
        items += r.data["items"]
        cursor = r.data["nextCursor"]
        if cursor is None:
            return items


def env_of(server: TestServer) -> dict[str, str]:
    return {"LBAUTH_DATABASE_URL": server.settings.database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}


async def audit_cli(server: TestServer, *args: str) -> list[dict]:
    """`lbauth audit list ... --json`: one JSON object per line."""
    result = await arun_cli("audit", "list", *args, "--json", env=env_of(server))
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


async def lbauth(server: TestServer, *args: str) -> Any:
    result = await arun_cli(*args, "--json", env=env_of(server))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def rows(server: TestServer) -> int:
    return await server.db.read(lambda conn: conn.execute(text("SELECT count(*) FROM audit_events")).scalar_one())


def types(events: list[dict]) -> list[str]:
    return [e["type"] + ("" if e["outcome"] == "success" else f":{e['outcome']}") for e in events]


async def login(server: Any, email: str, password: str, agent: str = CHROME_LINUX, source: str | None = None):
    return await server.client.post("/api/auth/login", json={"email": email, "password": password},
                                    headers={"User-Agent": agent}, source=source)


# ---- a user's own account ----------------------------------------------------------------------------------

async def test_a_users_own_changes_are_recorded_and_read_back_by_the_api_and_the_cli(server):
    user = await server.create_user()
    email, password = user["email"], user["password"]
    assert (await login(server, email, "not the password", FIREFOX_MAC)).status == 401
    before = await rows(server)
    assert (await login(server, "nobody-" + email, password)).status == 401
    assert await rows(server) == before  # an unknown address records nothing
    token = (await login(server, email, password)).data["token"]
    assert (await login(server, email, password, SAFARI_IPHONE)).status == 200
    (phone_session,) = [s for s in await sessions_of(server, token) if s["userAgent"] == SAFARI_IPHONE]
    assert (await end_session(server, token, phone_session["sessionId"])).status == 200
    await login(server, email, password, FIREFOX_MAC)
    r = await server.client.post("/api/account/sessions/end-others", bearer=token)
    assert r.data == {"ended": 1}
    new_password = "an entirely new passphrase"
    assert (await change_password(server, token, password, new_password)).status == 200
    app = await lbauth(server, "apps", "create", "--name", "Notes", "--owner", email, "--redirect-uri", REGISTERED_URI)
    for scope in (["userinfo"], ["userinfo"], ["userinfo", "chat.read"]):  # the second is within the grant
        assert (await authorize(server, token, app["clientId"], REGISTERED_URI, scope)).status == 200
    r = await server.client.delete(f"/api/auth/authorizations/{app['clientId']}", bearer=token)
    assert r.status == 200, r.text
    await lbauth(server, "apps", "rotate-secret", app["clientId"])
    assert (await server.client.post("/api/auth/logout", bearer=token)).status == 200
    token = (await login(server, email, new_password)).data["token"]

    events = await activity(server, token)
    assert types(events) == [
        "sign_in", "session.ended", "app.secret_rotated", "authorization.revoked", "consent.given", "consent.given",
        "app.created", "password.changed", "session.ended", "sign_in", "session.ended", "sign_in", "sign_in",
        "sign_in:failure"]
    assert all(set(e) == FIELDS and e["userId"] == user["userId"] for e in events)
    assert len({e["eventId"] for e in events}) == len(events)
    by_user = {"type": "user", "id": user["userId"]}
    failed, first = events[-1], events[-2]
    assert first["occurredAt"] == "2030-03-17T17:46:40Z"  # the server's clock (the CLI's events: the system's)
    assert (failed["actor"], failed["ipAddress"], failed["userAgent"], failed["detail"]) == (
        by_user, "127.0.0.1", FIREFOX_MAC, {"method": "password", "reason": "wrong_password"})
    assert failed["description"] == "Failed sign-in (wrong password) from Firefox on macOS, 127.0.0.1"
    assert first["description"] == "Signed in from Chrome on Linux, 127.0.0.1"
    assert first["detail"] == {"method": "password", "kind": "api"}
    assert events[-3]["description"] == "Signed in from Safari on iPhone, 127.0.0.1"
    assert events[-4]["detail"] == {"ended": "one", "sessionId": phone_session["sessionId"]}
    assert events[-6]["detail"] == {"ended": "others", "count": 1}
    assert events[-7]["detail"] == {"endedSessions": 0}
    created, rotated = events[-8], events[2]
    assert created["actor"] == rotated["actor"] == OPERATOR and created["ipAddress"] is None
    assert created["detail"] == {"clientId": app["clientId"], "app": "Notes"}
    assert rotated["detail"] == {"clientId": app["clientId"], "app": "Notes", "secret": "client"}
    assert [e["detail"]["scopes"] for e in events[4:6]] == ["userinfo chat.read", "userinfo"]
    assert events[3]["detail"] == {"clientId": app["clientId"], "app": "Notes"}
    assert events[1]["detail"]["ended"] == "this" and events[1]["description"] == "Signed out from Tornado, 127.0.0.1"

    # The operators' view of the same events, newest first, with the user's email.
    listed = await audit_cli(server, "--user", email)
    assert [e["eventId"] for e in listed] == [e["eventId"] for e in events]
    assert {e["email"] for e in listed} == {email}
    assert [{k: v for k, v in e.items() if k != "email"} for e in listed] == events
    assert types(await audit_cli(server, "--user", email, "--type", "sign_in")) == [
        "sign_in", "sign_in", "sign_in", "sign_in", "sign_in:failure"]
    table = await arun_cli("audit", "list", "--user", email, env=env_of(server))
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:3] == ["TIME", "(UTC)", "TYPE"] and len(lines) == len(events) + 1
    assert "Signed in from Chrome on Linux, 127.0.0.1" in lines[1] and email in lines[1]
    assert "2030-03-17" in lines[1] and "operator" in lines[3]


async def test_operators_changes_are_recorded_and_a_deleted_users_events_stay_without_personal_data(server):
    user = await server.create_user()
    email = user["email"]
    token = (await login(server, email, user["password"], source="127.0.0.9")).data["token"]
    for command in ("disable", "enable", "reset-factors"):
        await lbauth(server, "users", command, email)
    token = (await login(server, email, user["password"])).data["token"]
    assert types(await activity(server, token)) == [
        "sign_in", "factors.reset", "user.enabled", "user.disabled", "sign_in"]
    events = await audit_cli(server, "--user", email)
    assert all(e["actor"] == OPERATOR for e in events[1:4])
    assert [e["description"] for e in events[1:4]] == [
        "Every second factor removed by an operator", "Account enabled by an operator",
        "Account disabled by an operator"]
    assert events[-1]["ipAddress"] == "127.0.0.9"

    assert (await lbauth(server, "users", "delete", email))["status"] == "deleted"
    result = await arun_cli("audit", "list", "--user", email, env=env_of(server))
    assert result.returncode == 1 and "no" in result.stderr.lower()  # the address is gone with the account
    kept = await audit_cli(server, "--user", user["userId"])
    assert types(kept) == ["user.deleted", "sign_in", "factors.reset", "user.enabled", "user.disabled", "sign_in"]
    assert kept[0]["actor"] == OPERATOR and kept[0]["detail"] == {"revokedAuthorizations": 0}
    assert {(e["ipAddress"], e["userAgent"], e["email"]) for e in kept} == {(None, None, None)}


@requires_oathtool
async def test_the_second_factor_events(server):
    srv = server
    user, token, secret, codes = await enrolled(srv)  # totp.added
    step = await api_password_step(srv, user)  # sign_in pending
    wrong = str((int(oathtool(secret, srv.clock.now())) + 1) % 1_000_000).zfill(6)
    (await second_step(srv, step["mfaToken"], "totp", wrong)).assert_error(401, "auth.mfa.failed")
    r = await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now()))
    assert r.status == 200, r.text
    fresh = r.data["token"]
    step = await api_password_step(srv, user)
    assert (await second_step(srv, step["mfaToken"], "recovery_code", codes[0])).status == 200
    r = await srv.client.post("/api/account/security/recovery-codes", bearer=fresh)
    assert r.status == 200, r.text
    assert (await srv.client.delete("/api/account/security/totp", bearer=fresh)).status == 200

    events = await activity(srv, fresh)
    assert types(events) == [
        "totp.removed", "recovery_codes.regenerated", "sign_in", "second_step", "recovery_code.used", "sign_in:pending",
        "sign_in", "second_step", "second_step:failure", "sign_in:pending", "totp.added", "sign_in"]
    assert events[2]["detail"]["method"] == "password+recovery_code"
    assert events[4]["detail"] == {"left": 9}
    assert [events[i]["detail"]["method"] for i in (3, 7, 8)] == ["recovery_code", "totp", "totp"]
    assert events[6]["description"] == "Signed in with a password and an authenticator app from Tornado, 127.0.0.1"
    assert events[8]["description"] == "Second step with an authenticator app failed from Tornado, 127.0.0.1"
    assert events[9]["description"] == "Right password; a second step was asked for from Tornado, 127.0.0.1"
    assert [e["eventId"] for e in await audit_cli(srv, "--user", user["email"])] == [e["eventId"] for e in events]


async def test_the_email_and_recovery_events(mail_server, mailbox):  # noqa: F811 (fixtures)
    srv = mail_server
    email = f"person-{secrets.token_hex(4)}@example.com"
    assert (await sign_up(srv, email)).status == 202
    confirmed = await PageSession(srv).get(link_in(await mailbox.next(to=email), "lba_su_"))
    assert confirmed.status == 303, confirmed.text
    token = (await login(srv, email, PASSWORD)).data["token"]
    assert (await srv.client.post("/api/account/email/verify", bearer=token)).status == 200  # verified by sign-up
    new = f"moved-{secrets.token_hex(4)}@example.com"
    r = await srv.client.post("/api/account/email", json={"newEmail": new, "password": PASSWORD}, bearer=token)
    assert r.status == 202, r.text
    assert (await srv.client.get(link_in(await mailbox.next(to=new), "lba_ec_"))).status == 200
    link = await reset_link(srv, mailbox, new)
    assert (await reset(srv, token_of(link))).status == 200
    token = (await login(srv, new, NEW_PASSWORD)).data["token"]
    events = await activity(srv, token)
    assert types(events) == ["sign_in", "password.reset", "email.changed", "sign_in", "sign_in"]
    assert events[-1]["detail"] == {"method": "signup", "kind": "browser"}
    assert events[1]["detail"] == {"endedSessions": 2}  # the browser's, from the sign-up, and the API's

    other = await srv.create_user()
    other_token = (await login(srv, other["email"], other["password"])).data["token"]
    r = await srv.client.post("/api/account/email/verify", bearer=other_token)
    assert r.status == 202, r.text
    assert (await srv.client.get(link_in(await mailbox.next(to=other["email"]), "lba_ev_"))).status == 200
    assert types(await activity(srv, other_token))[0] == "email.verified"


async def test_registrations_consent_on_the_page_and_key_rotations(dev, site):  # noqa: F811 (fixtures)
    server = dev
    r = await server.client.post("/oauth/register", json={"client_name": "Self Made", "redirect_uris": [
        "https://self.example/cb"], "token_endpoint_auth_method": "none"}, headers={"User-Agent": "mcp-agent/0.9"})
    assert r.status == 201, r.text
    dynamic = r.json["client_id"]
    client_id = site.publish("agents/smith.json", document())
    user = await server.create_user()
    session, page = await consent(server, client_id, user=user)  # the document is fetched and stored
    answer = await session.decide(page, "approve")
    assert answer.status in (302, 303)

    registered = await audit_cli(server, "--type", "client.registered")
    assert [(e["actor"], e["userId"], e["detail"]["via"]) for e in registered] == [
        ({"type": "client", "id": client_id}, None, "document"), ({"type": "client", "id": dynamic}, None, "dynamic")]
    assert registered[1]["userAgent"] == "mcp-agent/0.9" and registered[1]["detail"]["app"] == "Self Made"
    assert registered[0]["detail"]["app"] == "Agent Smith"
    token = (await login(server, user["email"], user["password"])).data["token"]
    given = [e for e in await activity(server, token) if e["type"] == "consent.given"]
    assert [(e["detail"]["clientId"], e["ipAddress"]) for e in given] == [(client_id, "127.0.0.1")]
    assert given[0]["description"].startswith("Gave Agent Smith access from ")

    env = env_of(server)
    staged = json.loads((await atool("rotate_signing_key.py", "stage", "--json", env=env)).stdout)
    for step in ("promote", "retire"):
        result = await atool("rotate_signing_key.py", step, "--force", "--json", env=env)
        assert result.returncode == 0, result.stderr
    result = await atool("rotate_master_key.py", "reseal", "--json", env=env)
    assert result.returncode == 0, result.stderr
    rotated = await audit_cli(server, "--type", "key.rotated")
    assert [e["detail"]["step"] for e in rotated] == ["reseal", "retire", "promote", "stage"]
    assert rotated[-1]["detail"]["kid"] == rotated[-2]["detail"]["kid"] == staged["kid"]
    assert {json.dumps(e["actor"]) for e in rotated} == {json.dumps(OPERATOR)}
    assert rotated[-1]["userId"] is None and rotated[-1]["description"] == f"Signing key {staged['kid']} staged" \
        " by an operator"


async def test_a_reused_refresh_token_revokes_the_grant_and_the_server_says_so(server):
    setup = await public_setup(server)
    first = await public_tokens(server, setup)
    second = (await refreshed(server, setup, first["refresh_token"])).json
    assert second["refresh_token"]
    server.clock.advance(GRACE + 1)
    assert (await refreshed(server, setup, first["refresh_token"])).status == 400
    (revoked,) = [e for e in await activity(server, setup.token) if e["type"] == "authorization.revoked"]
    assert revoked["actor"] == {"type": "system", "id": None}
    assert revoked["detail"] == {"clientId": setup.client_id, "app": "Test App", "reason": "reuse"}
    assert revoked["description"] == "Access of Test App revoked: a refresh token was used twice by the server"


async def test_approving_a_device_is_consent_too(server):
    setup = await full_setup(server, device=True)
    flow = await started(server, setup, scope="userinfo chat.read")
    await answer(server, setup, flow["user_code"], "approve")
    (given,) = [e for e in await activity(server, setup.token) if e["type"] == "consent.given"]
    assert given["detail"] == {"clientId": setup.client_id, "app": "Test App", "scopes": "userinfo chat.read"}
    assert given["ipAddress"] == "127.0.0.1" and given["userAgent"].startswith("Tornado/")


# ---- paging, limits, retention ----------------------------------------------------------------------------------

async def test_pages_come_newest_first_and_a_cursor_gives_the_next_page_without_repeats(server):
    user = await server.create_user()
    for _ in range(24):
        assert (await login(server, user["email"], "not the password")).status == 401
        server.clock.advance(1)
    token = (await login(server, user["email"], user["password"])).data["token"]
    everything = await activity(server, token, limit=100)
    assert len(everything) == 25 and types(everything) == ["sign_in"] + ["sign_in:failure"] * 24

    pages, cursor = [], None
    while True:
        path = "/api/account/activity?limit=10" + (f"&cursor={cursor}" if cursor else "")
        r = await server.client.get(path, bearer=token)
        assert r.status == 200, r.text
        pages.append([e["eventId"] for e in r.data["items"]])
        cursor = r.data["nextCursor"]
        if cursor is None:
            break
    assert [len(p) for p in pages] == [10, 10, 5]
    assert sum(pages, []) == [e["eventId"] for e in everything]  # in order, none twice, none left out
    default = await server.client.get("/api/account/activity", bearer=token)
    assert len(default.data["items"]) == 20 and default.data["nextCursor"]
    # A new event after the first page does not shift the next one.
    first = await server.client.get("/api/account/activity?limit=10", bearer=token)
    await login(server, user["email"], "not the password")
    after = await server.client.get(f"/api/account/activity?limit=10&cursor={first.data['nextCursor']}", bearer=token)
    assert [e["eventId"] for e in after.data["items"]] == pages[1]

    for bad in ("cursor=nonsense", "cursor=", "limit=0", "limit=101", "limit=ten", f"cursor={'A' * 50}"):
        (await server.client.get(f"/api/account/activity?{bad}", bearer=token)).assert_error(
            400, "request.validation_failed")
    (await server.client.get("/api/account/activity")).assert_error(401, "oauth2.token.missing")
    # Another user's activity is not theirs to read.
    other = await server.create_user()
    other_token = (await login(server, other["email"], other["password"])).data["token"]
    assert types(await activity(server, other_token)) == ["sign_in"]

    page_session = PageSession(server)
    page = await page_session.open_logged_in("/account/activity", user["email"], user["password"])
    assert page.status == 200 and "Recent activity" in page.text
    html = page.response.text
    assert html.count('class="event') == audit_log.DEFAULT_PAGE
    assert html.index("Signed in from Tornado, 127.0.0.1") < html.index("Failed sign-in (wrong password)")
    older = re.search(r'href="(/account/activity\?cursor=[^"]+)" rel="next">Older activity', html)
    assert older is not None
    rest = await page_session.get(older.group(1).replace("&amp;", "&"))
    assert rest.status == 200 and "Older activity" not in rest.text
    assert rest.response.text.count('class="event') == 27 - 20  # 25 failed sign-ins, 2 sign-ins; 20 on page 1


async def test_failed_sign_ins_past_the_rate_limit_write_nothing(tmp_path, database_url):
    async with running_server(tmp_path, database_url, rate_limits="login-account=3/60") as server:
        user = await server.create_user()
        before = await rows(server)
        answers = [(await login(server, user["email"], "not the password")).status for _ in range(10)]
        assert answers == [401] * 3 + [429] * 7
        assert await rows(server) == before + 3
        server.clock.advance(60)
        token = (await login(server, user["email"], user["password"])).data["token"]
        assert types(await activity(server, token)) == ["sign_in"] + ["sign_in:failure"] * 3


async def test_events_older_than_the_retention_are_removed_in_batches(tmp_path, database_url, monkeypatch):
    async with running_server(tmp_path, database_url, audit_retention_days="30") as server:
        await server.quiet()  # the sweep runs when the test says
        user = await server.create_user()
        for _ in range(5):
            await login(server, user["email"], "not the password")
        server.clock.advance(29 * 86400)
        token = (await login(server, user["email"], user["password"])).data["token"]
        assert await server.services.audit.forget_old() == 0
        server.clock.advance(86400 + 1)  # the first five are 30 days and a second old
        monkeypatch.setattr(audit_log, "PRUNE_BATCH", 2)
        statements = server.db.statements
        assert await server.services.audit.forget_old() == 5
        assert server.db.statements - statements == 3  # 2 + 2 + 1, a transaction each
        assert types(await activity(server, token)) == ["sign_in"]
        assert await server.services.audit.forget_old() == 0


async def test_the_cli_filters_by_time_and_refuses_what_it_cannot_read(server):
    user = await server.create_user()
    await login(server, user["email"], "not the password")
    server.clock.advance(86400)
    await login(server, user["email"], user["password"])
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(START_TIME + 3600))
    assert types(await audit_cli(server, "--since", since)) == ["sign_in"]
    assert len(await audit_cli(server, "--since", "2030-03-17")) == 2
    assert len(await audit_cli(server, "--limit", "1")) == 1
    for args, status, says in ((("--since", "yesterday"), 2, "ISO 8601"), (("--type", "nonsense"), 2, "invalid choice"),
                               (("--user", "nobody@example.com"), 1, "No user")):
        result = await arun_cli("audit", "list", *args, env=env_of(server))
        assert result.returncode == status and says in result.stderr and "Traceback" not in result.stderr, \
            result.stderr
    assert (await arun_cli("audit", "list", "--type", "user.deleted", env=env_of(server))).stdout.strip() == "(none)"


# ---- a crash between the change and its answer ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("point", ["before_event", "after_event", "before_answer"])
async def test_a_kill_between_a_change_and_its_answer_leaves_both_or_neither(tmp_path, database_url, point):
    """The password change's unit of work is stopped (SIGSTOP, tests/audit_pause.py) before its event
    is written, after it, or after the commit, and SIGKILLed there. After a restart, the new password
    works exactly when the change's event is in the log."""
    data, marker = tmp_path / "data", tmp_path / "paused"
    paused = ServerProcess(database_url, data)
    paused.argv = [sys.executable, str(ROOT / "tests" / "audit_pause.py")]
    paused.env.update(AUDIT_PAUSE_AT=point, AUDIT_PAUSE_TYPE=EventType.PASSWORD_CHANGED,
                      AUDIT_PAUSE_PATH="/api/account/password", AUDIT_PAUSE_MARKER=str(marker))
    restarted = ServerProcess(database_url, data)
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(data)}
    email, old, new = f"crash-{secrets.token_hex(4)}@example.com", "the old passphrase 1", "the new passphrase 2"
    try:
        created = await arun_cli("users", "create", "--email", email, "--name", "Crash", "--password", old, env=env)
        assert created.returncode == 0, created.stderr
        await paused.start()
        token = (await login(paused, email, old)).data["token"]
        change = asyncio.ensure_future(change_password(paused, token, old, new))
        await wait_until(marker.exists, 15, f"the server stopped at {point}")
        paused.kill()
        with pytest.raises((OSError, HTTPClientError)):  # no answer ever came
            await change
        await restarted.start()
        changed = await audit_cli_at(env, "--type", "password.changed")
        statuses = [(await login(restarted, email, password)).status for password in (old, new)]
        if point == "before_answer":
            assert (statuses, len(changed)) == ([401, 200], 1)
        else:
            assert (statuses, changed) == ([200, 401], [])
    finally:
        paused.kill()
        paused.client.close()
        restarted.stop()


async def audit_cli_at(env: dict[str, str], *args: str) -> list[dict]:
    result = await arun_cli("audit", "list", *args, "--json", env=env)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


# ---- erasure: the bytes at rest ---------------------------------------------------------------------------------

async def test_a_deleted_users_events_leave_no_email_address_or_user_agent_at_rest(server, database_url, backend):
    mark = secrets.token_hex(6)
    address = f"127.{int(mark[:2], 16) % 200 + 20}.{int(mark[2:4], 16)}.{int(mark[4:6], 16) % 250 + 2}"
    agent = f"Mozilla/5.0 (X11; Linux x86_64) Erasable/{mark} Firefox/133.0"
    user = await server.create_user(email=f"audited.{mark}@example.com")
    await login(server, user["email"], "not the password", agent, source=address)
    token = (await login(server, user["email"], user["password"], agent, source=address)).data["token"]
    r = await server.client.post("/api/account/sessions/end-others", bearer=token, source=address,
                                 headers={"User-Agent": agent})
    assert r.status == 200
    present = await _bytes_at_rest(server, database_url, backend)
    needles = [user["email"].encode(), address.encode(), f"Erasable/{mark}".encode()]
    assert all(needle in present for needle in needles)  # the scan sees them

    r = await delete_account(server, token, user["password"])
    assert r.status == 200, r.text
    answered = time.monotonic()
    while True:
        at_rest = await _bytes_at_rest(server, database_url, backend)
        left = [needle.decode() for needle in needles if needle in at_rest]
        if not left:
            break
        assert time.monotonic() - answered < 10, f"still at rest 10 s after the deletion: {left}"
        await asyncio.sleep(0.5)
    kept = await audit_cli(server, "--user", user["userId"])
    assert types(kept) == ["user.deleted", "sign_in", "sign_in:failure"]  # what happened stays, not who or where
    assert kept[0]["actor"] == {"type": "user", "id": user["userId"]}


# ---- the pages ------------------------------------------------------------------------------------------------

async def test_the_activity_and_sessions_pages_in_a_browser(browser, local_server):  # noqa: F811 (fixture)
    from playwright.async_api import expect
    server = local_server
    user = await server.create_user()
    async with device(browser, server) as d:
        await without_autofill(d)
        await d.add_authenticator()
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Laptop")
        await sign_out(d)
        await passkey_sign_in(d, "/account/")
        await sign_out(d)
        await password_step(d, user["email"], user["password"], next_path="/account/activity")
        await d.page.get_by_role("button", name="Use a passkey").click()
        await d.page.wait_for_url(lambda url: url.endswith("/account/activity"))

        page = d.page
        agent = await page.evaluate("navigator.userAgent")
        device_name = describe_agent(agent)
        assert device_name == "Chrome on Linux", agent
        await expect(page.get_by_role("heading", name="Recent activity")).to_be_visible()
        lines = page.locator("li.event .what")
        await expect(lines.first).to_have_text("Signed in with a password and a passkey from Chrome on Linux, "
                                               "127.0.0.1")
        texts = await lines.all_inner_texts()
        assert "Signed in from Chrome on Linux, 127.0.0.1" in texts, texts
        assert "Signed in with a passkey from Chrome on Linux, 127.0.0.1" in texts, texts
        assert "Passkey added from Chrome on Linux, 127.0.0.1" in texts, texts
        assert "Second step with a passkey passed from Chrome on Linux, 127.0.0.1" in texts, texts
        when = await page.locator("li.event time").first.inner_text()
        assert re.fullmatch(r"17 March 2030, \d\d:\d\d UTC", when), when
        await expect(page.get_by_role("link", name="Activity")).to_have_attribute("aria-current", "page")
        from tests.test_browser import page_problems
        assert await page_problems(page) == []

        await page.goto(d.tab.url("/account/sessions"))
        await expect(page.locator("dd.agent").first).to_have_text(device_name)
        d.tab.assert_no_csp_violation()


# ---- the user agent in words ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("agent", "words"), [
    (CHROME_LINUX, "Chrome on Linux"),
    (FIREFOX_MAC, "Firefox on macOS"),
    (SAFARI_IPHONE, "Safari on iPhone"),
    ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 "
     "Safari/537.36 Edg/131.0.0.0", "Edge on Windows"),
    ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Mobile "
     "Safari/537.36", "Chrome on Android"),
    ("Mozilla/5.0 (iPad; CPU OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/131.0 "
     "Mobile/15E148 Safari/604.1", "Chrome on iPad"),
    ("Mozilla/5.0 (Linux; Android 14; Pixel 8) lbauth-tests/1.0", "Unknown browser on Android"),
    ("curl/8.5.0", "curl"),
    ("python-requests/2.32.3", "Python requests"),
    ("mcp-agent/0.9", "mcp-agent"),
    ("", "Unknown browser"),
    (None, "Unknown browser"),
    ("%%%", "Unknown browser"),
])
def test_a_user_agent_in_words(agent, words):
    assert describe_agent(agent) == words


def test_every_event_type_is_documented():
    operations = (ROOT / "docs" / "operations.md").read_text()
    api = (ROOT / "docs" / "api.md").read_text()
    for event_type in EventType:
        assert f"`{event_type.value}`" in operations and f"`{event_type.value}`" in api, event_type


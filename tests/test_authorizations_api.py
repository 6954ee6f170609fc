"""The user's authorizations API (contract section 7): GET /api/auth/authorizations lists the apps
a user authorized; DELETE /api/auth/authorizations/{clientId} revokes one, its tokens refused at
once. And what revokes nothing: `lbauth apps test-webhook`. Envelope errors are checked with
Response.assert_error (contract 3)."""

from __future__ import annotations

import asyncio
import json
import secrets

from tests.conftest import START_TIME, run_cli
from tests.flow_helpers import code_for, exchange, full_setup, refresh, tokens_for
from tests.revocation_helpers import (
    AUTHORIZATION_FIELDS,
    INVALID_TOKEN,
    assert_revoked_at_me,
    assert_works_at_me,
    authorizations,
    basic,
    feed,
    introspect,
    iso,
    me,
    other_user,
    parse_iso,
    revoke_app,
    second_app,
)
from tests.support import unverified_claims

# ---- GET /api/auth/authorizations -----------------------------------------------------------------------

async def test_authorizations_is_empty_before_any_grant(server):
    s = await full_setup(server)
    assert await authorizations(server, s.token) == []


async def test_authorizations_lists_each_live_grant_with_its_fields(server):
    s = await full_setup(server, name="Moonbeam Notes")
    t = await second_app(server, s)
    await tokens_for(server, s, ["userinfo", "chat.read"])
    server.clock.advance(60)
    await code_for(server, t, ["memory.read"])  # an approval alone makes the grant; no exchange needed

    items = {item["clientId"]: item for item in await authorizations(server, s.token)}
    assert set(items) == {s.client_id, t.client_id}
    first, second = items[s.client_id], items[t.client_id]
    assert set(first) == AUTHORIZATION_FIELDS and set(second) == AUTHORIZATION_FIELDS
    assert first["appId"] == s.app["appId"] and second["appId"] == t.app["appId"]
    assert first["appName"] == "Moonbeam Notes" and second["appName"] == "Other App"
    assert sorted(first["scopes"]) == ["chat.read", "userinfo"]
    assert second["scopes"] == ["memory.read"]
    assert first["grantedAt"] == iso(START_TIME) and parse_iso(first["grantedAt"]) == START_TIME
    assert second["grantedAt"] == iso(START_TIME + 60)


async def test_authorizations_shows_the_union_of_scopes_after_a_second_approval(server):
    s = await full_setup(server)
    await code_for(server, s, ["userinfo"])
    await code_for(server, s, ["chat.read"])
    (item,) = await authorizations(server, s.token)
    assert sorted(item["scopes"]) == ["chat.read", "userinfo"]


async def test_authorizations_shows_only_the_callers_grants(server):
    s = await full_setup(server)
    b = await other_user(server, s)
    await code_for(server, s)
    assert await authorizations(server, b.token) == []
    assert [i["clientId"] for i in await authorizations(server, s.token)] == [s.client_id]


async def test_authorizations_without_a_token_is_token_missing(server):
    r = await server.client.get("/api/auth/authorizations")
    r.assert_error(401, "oauth2.token.missing")
    assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_authorizations_refuses_a_garbage_token_and_an_access_token(server):
    s = await full_setup(server)
    access = (await tokens_for(server, s))["accessToken"]
    for bearer in ("lba_ut_" + secrets.token_urlsafe(32), access):
        r = await server.client.get("/api/auth/authorizations", bearer=bearer)
        r.assert_error(401, "oauth2.token.invalid")
        assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


# ---- DELETE /api/auth/authorizations/{clientId} ---------------------------------------------------------

async def test_revoking_an_app_answers_client_id_revoked_at_and_event_id(server):
    s = await full_setup(server)
    await tokens_for(server, s)
    server.clock.advance(90)
    r = await revoke_app(server, s.token, s.client_id)
    assert r.status == 200, r.text
    assert set(r.data) == {"clientId", "revokedAt", "eventId"}
    assert r.data["clientId"] == s.client_id
    assert r.data["revokedAt"] == iso(START_TIME + 90)
    assert isinstance(r.data["eventId"], str) and r.data["eventId"]
    assert await authorizations(server, s.token) == []


async def test_revoking_an_app_refuses_its_access_tokens_at_once(server):
    s = await full_setup(server)
    first = await tokens_for(server, s)
    second = await tokens_for(server, s)
    refreshed = (await refresh(server, first["refreshToken"], s.client_id, s.client_secret)).data
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    for token in (first["accessToken"], second["accessToken"], refreshed["accessToken"]):
        await assert_revoked_at_me(server, token)
    r = await server.client.get("/api/service/user/info", bearer=first["accessToken"])
    r.assert_error(401, "oauth2.token.revoked")


async def test_revoking_an_app_revokes_every_refresh_token_of_the_grant(server):
    s = await full_setup(server)
    first, second = await tokens_for(server, s), await tokens_for(server, s)
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    for token_set in (first, second):
        r = await refresh(server, token_set["refreshToken"], s.client_id, s.client_secret)
        r.assert_error(400, "oauth2.refresh_token.revoked")
    r = await server.client.post("/oauth/token", form={"grant_type": "refresh_token",
                                                       "refresh_token": first["refreshToken"]},
                                 headers=basic(s.client_id, s.client_secret))
    assert r.status == 400 and r.json["error"] == "invalid_grant"


async def test_revoking_an_app_invalidates_its_unredeemed_code(server):
    s = await full_setup(server)
    code = await code_for(server, s)
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    r = await exchange(server, code, s.redirect_uri, s.client_id, s.client_secret)
    r.assert_error(400, "oauth2.code.invalid")


async def test_revoking_an_app_leaves_other_apps_working(server):
    s = await full_setup(server)
    t = await second_app(server, s)
    mine, theirs = await tokens_for(server, s), await tokens_for(server, t)
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    await assert_works_at_me(server, theirs["accessToken"])
    assert (await refresh(server, theirs["refreshToken"], t.client_id, t.client_secret)).status == 200
    assert [i["clientId"] for i in await authorizations(server, s.token)] == [t.client_id]
    await assert_revoked_at_me(server, mine["accessToken"])


async def test_revoking_an_app_leaves_other_users_of_that_app_working(server):
    s = await full_setup(server)
    b = await other_user(server, s)
    mine, theirs = await tokens_for(server, s), await tokens_for(server, b)
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    await assert_works_at_me(server, theirs["accessToken"])
    assert (await refresh(server, theirs["refreshToken"], b.client_id, b.client_secret)).status == 200
    assert [i["clientId"] for i in await authorizations(server, b.token)] == [s.client_id]
    await assert_revoked_at_me(server, mine["accessToken"])


async def test_revoking_an_app_writes_an_authorization_revoked_event_to_the_outbox(server, database_url):
    s = await full_setup(server)
    await tokens_for(server, s)
    event_id = (await revoke_app(server, s.token, s.client_id)).data["eventId"]
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
    result = await asyncio.to_thread(run_cli, "webhooks", "list", "--app", s.client_id, "--json", env=env)
    assert result.returncode == 0, result.stderr
    (event,) = json.loads(result.stdout)
    assert event["eventId"] == event_id
    assert event["clientId"] == s.client_id and event["appId"] == s.app["appId"]
    assert event["eventType"] == "authorization.revoked" and event["reason"] == "user_revoked"


async def test_revoking_twice_is_authorization_not_found(server):
    s = await full_setup(server)
    await code_for(server, s)
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    (await revoke_app(server, s.token, s.client_id)).assert_error(404, "oauth2.authorization.not_found")


async def test_revoking_an_app_without_a_grant_is_authorization_not_found(server):
    s = await full_setup(server)
    (await revoke_app(server, s.token, s.client_id)).assert_error(404, "oauth2.authorization.not_found")
    (await revoke_app(server, s.token, "cid_" + secrets.token_hex(12))).assert_error(
        404, "oauth2.authorization.not_found")


async def test_revoking_cannot_touch_another_users_grant(server):
    s = await full_setup(server)
    b = await other_user(server, s)
    theirs = await tokens_for(server, b)
    (await revoke_app(server, s.token, s.client_id)).assert_error(404, "oauth2.authorization.not_found")
    await assert_works_at_me(server, theirs["accessToken"])
    assert [i["clientId"] for i in await authorizations(server, b.token)] == [s.client_id]


async def test_revoking_needs_a_user_token(server):
    s = await full_setup(server)
    access = (await tokens_for(server, s))["accessToken"]
    r = await server.client.delete(f"/api/auth/authorizations/{s.client_id}")
    r.assert_error(401, "oauth2.token.missing")
    assert r.headers["WWW-Authenticate"] == "Bearer"
    r = await revoke_app(server, access, s.client_id)
    r.assert_error(401, "oauth2.token.invalid")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN
    await assert_works_at_me(server, access)
    assert len(await authorizations(server, s.token)) == 1


async def test_authorizing_again_after_revoking_makes_a_new_grant_with_the_same_app_scoped_user_id(server):
    s = await full_setup(server)
    old = await tokens_for(server, s)
    old_me = (await me(server, old["accessToken"])).data
    assert (await revoke_app(server, s.token, s.client_id)).status == 200

    new = await tokens_for(server, s)  # in the same second as the revocation (the clock is frozen)
    new_me = await me(server, new["accessToken"])
    assert new_me.status == 200, new_me.text
    assert new_me.data["appScopedUserId"] == old_me["appScopedUserId"]
    assert unverified_claims(new["accessToken"])["gid"] != unverified_claims(old["accessToken"])["gid"]
    assert (await refresh(server, new["refreshToken"], s.client_id, s.client_secret)).status == 200
    assert [i["clientId"] for i in await authorizations(server, s.token)] == [s.client_id]
    # What the revoked grant issued stays refused.
    await assert_revoked_at_me(server, old["accessToken"])
    (await refresh(server, old["refreshToken"], s.client_id, s.client_secret)).assert_error(
        400, "oauth2.refresh_token.revoked")


async def test_a_token_verified_before_is_still_refused_once_revoked_or_expired(server):
    """The server remembers tokens whose signature it has checked (the bulk of /api/auth/me's cost);
    what it remembers never outlives a revocation, the token's expiry or a signing-key change."""
    s = await full_setup(server)
    revoked, expiring = await tokens_for(server, s), await tokens_for(server, await full_setup(server))
    for tokens in (revoked, expiring):
        for _ in range(2):
            assert (await server.client.get("/api/auth/me", bearer=tokens["accessToken"])).status == 200
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    (await server.client.get("/api/auth/me", bearer=revoked["accessToken"])).assert_error(401, "oauth2.token.revoked")
    server.clock.advance(7200)
    (await server.client.get("/api/auth/me", bearer=expiring["accessToken"])).assert_error(
        401, "oauth2.token.expired")


# ---- lbauth apps test-webhook ---------------------------------------------------------------------------

async def test_cli_test_webhook_queues_an_event_and_touches_no_grant(server, database_url):
    s = await full_setup(server, webhook_url="https://app.example/hook")
    t = await tokens_for(server, s)
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
    result = await asyncio.to_thread(run_cli, "apps", "test-webhook", s.client_id, "--json", env=env)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert set(answer) == {"eventId"} and isinstance(answer["eventId"], str) and answer["eventId"]

    assert [i["clientId"] for i in await authorizations(server, s.token)] == [s.client_id]
    await assert_works_at_me(server, t["accessToken"])
    assert (await refresh(server, t["refreshToken"], s.client_id, s.client_secret)).status == 200
    assert (await introspect(server, s, t["accessToken"]))["active"] is True
    assert (await feed(server)).data["items"] == []


async def test_an_event_for_an_app_without_a_webhook_url_says_why_it_failed(server, database_url):
    """`failed`, attempts 0, said nothing more: the text listing (and the console) give the reason;
    the JSON keeps exactly its documented fields."""
    s = await full_setup(server)  # an app without a webhook URL
    await tokens_for(server, s)
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
    listed = await asyncio.to_thread(run_cli, "webhooks", "list", "--app", s.client_id, "--json", env=env)
    (event,) = json.loads(listed.stdout)
    assert set(event) == {"eventId", "appId", "clientId", "eventType", "reason", "status", "attempts", "lastStatus",
                          "nextAttemptAt", "createdAt"}
    assert (event["status"], event["attempts"]) == ("failed", 0)
    text = await asyncio.to_thread(run_cli, "webhooks", "list", "--app", s.client_id, env=env)
    assert text.returncode == 0 and "the app has no webhook URL" in text.stdout, text.stdout

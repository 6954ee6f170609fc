"""Revocation (contract section 7): the user's authorizations API, the check-list feed for offline
verifiers, RFC 7009 token revocation and RFC 7662 introspection (contract 11), their metadata, and
`lbauth apps test-webhook` touching no grant. Envelope errors are checked with Response.assert_error
(contract 3); the RFC endpoints answer in the RFCs' own shapes."""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

import jwt
import pytest

from tests.conftest import START_TIME, run_cli
from tests.flow_helpers import Setup, code_for, exchange, full_setup, refresh, tokens_for

ACCESS_TTL = 7200
VERIFIER_LEEWAY = 60  # entries outlive the tokens they cover by the most leeway a verifier may use
REFRESH_TTL = 2592000
INVALID_TOKEN = 'Bearer error="invalid_token"'
AUTHORIZATION_FIELDS = {"appId", "clientId", "appName", "scopes", "grantedAt"}
ACCESS_INTROSPECTION_FIELDS = {"active", "token_type", "scope", "client_id", "sub", "iat", "exp", "iss", "aud", "jti"}


# ---- helpers -----------------------------------------------------------------------------------------

def iso(ts: int) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str) -> int:
    """An ISO 8601 UTC time with a `Z` suffix (contract 3), as a Unix time."""
    assert isinstance(value, str) and value.endswith("Z"), value
    return int(datetime.fromisoformat(value[:-1] + "+00:00").timestamp())


def claims_of(access_token: str) -> dict:
    """The access token's claims, read without verification (the test only looks at them)."""
    assert access_token.startswith("lba_at_")
    return jwt.decode(access_token[len("lba_at_"):], options={"verify_signature": False})


async def me(server, bearer):
    return await server.client.get("/api/auth/me", bearer=bearer)


async def assert_revoked_at_me(server, access_token: str) -> None:
    r = await me(server, access_token)
    r.assert_error(401, "oauth2.token.revoked")
    assert r.headers["WWW-Authenticate"] == INVALID_TOKEN


async def assert_works_at_me(server, access_token: str) -> None:
    r = await me(server, access_token)
    assert r.status == 200, r.text


async def authorizations(server, user_token: str) -> list[dict]:
    r = await server.client.get("/api/auth/authorizations", bearer=user_token)
    assert r.status == 200, r.text
    return r.data["items"]


async def revoke_app(server, user_token: str, client_id: str):
    return await server.client.delete(f"/api/auth/authorizations/{quote(client_id, safe='')}", bearer=user_token)


async def feed(server, since: str | None = None, headers: dict | None = None):
    path = "/api/oauth/revocations" + (f"?since={quote(since, safe='')}" if since is not None else "")
    return await server.client.get(path, headers=headers)


def basic(client_id: str, client_secret: str) -> dict[str, str]:
    """client_secret_basic: id and secret form-encoded, then base64 (RFC 6749 2.3.1)."""
    raw = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}".encode()
    return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


async def rfc_post(server, endpoint: str, setup: Setup, auth: str = "client_secret_basic", **form: str):
    """POST /oauth/revoke or /oauth/introspect as `setup`'s client, authenticated as `auth` says."""
    if auth == "client_secret_basic":
        return await server.client.post(endpoint, form=form, headers=basic(setup.client_id, setup.client_secret))
    assert auth == "client_secret_post"
    return await server.client.post(endpoint, form={**form, "client_id": setup.client_id,
                                                    "client_secret": setup.client_secret})


async def revoke_token(server, setup: Setup, token: str, auth: str = "client_secret_basic", **extra: str):
    return await rfc_post(server, "/oauth/revoke", setup, auth, token=token, **extra)


async def introspect(server, setup: Setup, token: str, auth: str = "client_secret_basic", **extra: str):
    r = await rfc_post(server, "/oauth/introspect", setup, auth, token=token, **extra)
    assert r.status == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    return r.json


def assert_revoke_ok(r) -> None:
    """RFC 7009 2.2: HTTP 200; the body is empty."""
    assert r.status == 200, r.text
    assert r.body == b""


async def second_app(server, owner: Setup) -> Setup:
    """Another app (another client), authorized by the same user."""
    app = await server.create_app(owner.user["email"], name="Other App", redirect_uris=[owner.redirect_uri])
    return Setup(user=owner.user, token=owner.token, app=app)


async def other_user(server, setup: Setup) -> Setup:
    """Another user, logged in, with the same app."""
    user = await server.create_user()
    token = await server.login(user["email"], user["password"])
    return Setup(user=user, token=token, app=setup.app)


# ---- GET /api/auth/authorizations ----------------------------------------------------------------------

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
    assert claims_of(new["accessToken"])["gid"] != claims_of(old["accessToken"])["gid"]
    assert (await refresh(server, new["refreshToken"], s.client_id, s.client_secret)).status == 200
    assert [i["clientId"] for i in await authorizations(server, s.token)] == [s.client_id]
    # What the revoked grant issued stays refused.
    await assert_revoked_at_me(server, old["accessToken"])
    (await refresh(server, old["refreshToken"], s.client_id, s.client_secret)).assert_error(
        400, "oauth2.refresh_token.revoked")


# ---- GET /api/oauth/revocations --------------------------------------------------------------------------

async def test_feed_is_empty_without_revocations(server):
    r = await feed(server)
    assert r.status == 200, r.text
    data = r.data
    assert set(data) == {"items", "cursor", "pollAfter"}
    assert data["items"] == []
    assert isinstance(data["cursor"], str)
    assert isinstance(data["pollAfter"], int) and not isinstance(data["pollAfter"], bool) and data["pollAfter"] >= 0


async def test_feed_lists_a_revoked_grant_without_credentials(server):
    s = await full_setup(server)
    gid = claims_of((await tokens_for(server, s))["accessToken"])["gid"]
    server.clock.advance(30)
    revoked_at = (await revoke_app(server, s.token, s.client_id)).data["revokedAt"]
    r = await feed(server)
    assert r.status == 200, r.text
    (item,) = r.data["items"]
    assert item == {"grantId": gid, "revokedAt": revoked_at,
                    "expiresAt": iso(START_TIME + 30 + ACCESS_TTL + VERIFIER_LEEWAY)}
    assert revoked_at == iso(START_TIME + 30)


async def test_feed_lists_a_revoked_access_token_by_jti_until_its_expiry(server):
    s = await full_setup(server)
    access = (await tokens_for(server, s))["accessToken"]
    claims = claims_of(access)
    server.clock.advance(100)
    assert_revoke_ok(await revoke_token(server, s, access))
    (item,) = (await feed(server)).data["items"]
    assert item == {"jti": claims["jti"], "revokedAt": iso(START_TIME + 100),
                    "expiresAt": iso(claims["exp"] + VERIFIER_LEEWAY)}


async def test_feed_since_the_returned_cursor_gives_only_later_entries(server):
    s = await full_setup(server)
    t = await second_app(server, s)
    first_gid = claims_of((await tokens_for(server, s))["accessToken"])["gid"]
    second_gid = claims_of((await tokens_for(server, t))["accessToken"])["gid"]

    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    page = (await feed(server)).data
    assert [i["grantId"] for i in page["items"]] == [first_gid]
    nothing_new = (await feed(server, page["cursor"])).data
    assert nothing_new["items"] == []

    server.clock.advance(5)
    assert (await revoke_app(server, t.token, t.client_id)).status == 200
    later = (await feed(server, page["cursor"])).data
    assert [i["grantId"] for i in later["items"]] == [second_gid]
    assert (await feed(server, nothing_new["cursor"])).data["items"] == later["items"]
    assert (await feed(server, later["cursor"])).data["items"] == []
    assert [i["grantId"] for i in (await feed(server)).data["items"]] == [first_gid, second_gid]


@pytest.mark.parametrize("since", ["not-a-cursor", "!!!", "cnYxOmFiYw", "x" * 300])
async def test_feed_refuses_an_invalid_cursor(server, since):
    (await feed(server, since)).assert_error(400, "request.validation_failed")


async def test_feed_etag_answers_304_until_something_changes(server):
    s = await full_setup(server)
    await code_for(server, s)
    first = await feed(server)
    etag = first.headers.get("ETag")
    assert etag, dict(first.headers)
    unchanged = await feed(server, headers={"If-None-Match": etag})
    assert unchanged.status == 304 and unchanged.body == b""

    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    changed = await feed(server, headers={"If-None-Match": etag})
    assert changed.status == 200 and len(changed.data["items"]) == 1
    assert changed.headers.get("ETag") and changed.headers["ETag"] != etag
    again = await feed(server, headers={"If-None-Match": changed.headers["ETag"]})
    assert again.status == 304


async def test_feed_entries_expire_with_the_longest_lived_access_token(server):
    s = await full_setup(server)
    access = (await tokens_for(server, s))["accessToken"]
    before = (await feed(server)).data["cursor"]
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    (item,) = (await feed(server)).data["items"]
    expires_at = parse_iso(item["expiresAt"])
    assert expires_at == parse_iso(item["revokedAt"]) + ACCESS_TTL + VERIFIER_LEEWAY

    server.clock.advance(expires_at - START_TIME - 1)
    assert len((await feed(server)).data["items"]) == 1
    server.clock.advance(2)
    assert (await feed(server)).data["items"] == []
    assert (await feed(server, before)).data["items"] == []
    # The token did not come back to life when its entry left the list: it has expired.
    (await me(server, access)).assert_error(401, "oauth2.token.expired")


# ---- POST /oauth/revoke (RFC 7009) ------------------------------------------------------------------------

@pytest.mark.parametrize("auth", ["client_secret_basic", "client_secret_post"])
async def test_revoking_a_refresh_token_refuses_it_and_the_grants_access_tokens(server, auth):
    s = await full_setup(server)
    first, second = await tokens_for(server, s), await tokens_for(server, s)
    assert_revoke_ok(await revoke_token(server, s, first["refreshToken"], auth))
    (await refresh(server, first["refreshToken"], s.client_id, s.client_secret)).assert_error(
        400, "oauth2.refresh_token.revoked")
    for token in (first["accessToken"], second["accessToken"]):
        await assert_revoked_at_me(server, token)


async def test_access_tokens_issued_after_a_refresh_token_revocation_work(server):
    s = await full_setup(server)
    first, second = await tokens_for(server, s), await tokens_for(server, s)
    assert_revoke_ok(await revoke_token(server, s, first["refreshToken"]))
    server.clock.advance(1)
    renewed = await refresh(server, second["refreshToken"], s.client_id, s.client_secret)
    assert renewed.status == 200, renewed.text
    await assert_works_at_me(server, renewed.data["accessToken"])
    await assert_works_at_me(server, (await tokens_for(server, s))["accessToken"])


async def test_access_tokens_issued_in_the_same_second_after_a_refresh_token_revocation_work(server):
    """'The access tokens of that grant issued so far' (RFC 7009 2.1): not the ones issued after,
    even within the same second (the frozen clock does not move here)."""
    s = await full_setup(server)
    first, second = await tokens_for(server, s), await tokens_for(server, s)
    assert_revoke_ok(await revoke_token(server, s, first["refreshToken"]))
    renewed = await refresh(server, second["refreshToken"], s.client_id, s.client_secret)
    assert renewed.status == 200, renewed.text
    await assert_works_at_me(server, renewed.data["accessToken"])
    await assert_works_at_me(server, (await tokens_for(server, s))["accessToken"])


@pytest.mark.parametrize("auth", ["client_secret_basic", "client_secret_post"])
async def test_revoking_an_access_token_refuses_only_that_token(server, auth):
    s = await full_setup(server)
    first, second = await tokens_for(server, s), await tokens_for(server, s)
    assert_revoke_ok(await revoke_token(server, s, first["accessToken"], auth))
    await assert_revoked_at_me(server, first["accessToken"])
    await assert_works_at_me(server, second["accessToken"])
    renewed = await refresh(server, first["refreshToken"], s.client_id, s.client_secret)
    assert renewed.status == 200, renewed.text
    await assert_works_at_me(server, renewed.data["accessToken"])
    assert len(await authorizations(server, s.token)) == 1


@pytest.mark.parametrize("token", ["lba_rt_" + "A" * 43, "lba_at_e30.e30.c2ln", "whatever", "lba_ut_" + "B" * 43])
async def test_revoking_an_unknown_token_answers_200(server, token):
    s = await full_setup(server)
    live = await tokens_for(server, s)
    assert_revoke_ok(await revoke_token(server, s, token))
    await assert_works_at_me(server, live["accessToken"])


async def test_revoking_an_already_revoked_token_answers_200(server):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    for _ in range(2):
        assert_revoke_ok(await revoke_token(server, s, t["refreshToken"]))
        assert_revoke_ok(await revoke_token(server, s, t["accessToken"]))
    await assert_revoked_at_me(server, t["accessToken"])


async def test_revoking_tokens_of_a_user_revoked_grant_answers_200(server):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    assert_revoke_ok(await revoke_token(server, s, t["refreshToken"]))
    assert_revoke_ok(await revoke_token(server, s, t["accessToken"]))


async def test_revoking_another_clients_token_leaves_it_working(server):
    s = await full_setup(server)
    t = await second_app(server, s)
    theirs = await tokens_for(server, t)
    assert_revoke_ok(await revoke_token(server, s, theirs["refreshToken"]))
    assert_revoke_ok(await revoke_token(server, s, theirs["accessToken"]))
    await assert_works_at_me(server, theirs["accessToken"])
    renewed = await refresh(server, theirs["refreshToken"], t.client_id, t.client_secret)
    assert renewed.status == 200, renewed.text
    assert (await introspect(server, t, theirs["accessToken"]))["active"] is True


async def test_revoke_honours_a_wrong_token_type_hint(server):
    """RFC 7009 2.1: a hint that does not fit makes the server search further."""
    s = await full_setup(server)
    t = await tokens_for(server, s)
    assert_revoke_ok(await revoke_token(server, s, t["accessToken"], token_type_hint="refresh_token"))
    await assert_revoked_at_me(server, t["accessToken"])
    assert (await refresh(server, t["refreshToken"], s.client_id, s.client_secret)).status == 200
    assert_revoke_ok(await revoke_token(server, s, t["refreshToken"], token_type_hint="access_token"))
    (await refresh(server, t["refreshToken"], s.client_id, s.client_secret)).assert_error(
        400, "oauth2.refresh_token.revoked")


def bad_credentials(s: Setup) -> dict[str, dict]:
    """Ways to fail client authentication: (extra form fields, headers)."""
    unknown = "cid_" + secrets.token_hex(12)
    return {
        "basic_wrong_secret": {"headers": basic(s.client_id, s.client_secret + "x")},
        "basic_unknown_client": {"headers": basic(unknown, s.client_secret)},
        "post_wrong_secret": {"form": {"client_id": s.client_id, "client_secret": "lba_cs_" + "C" * 43}},
        "post_unknown_client": {"form": {"client_id": unknown, "client_secret": s.client_secret}},
        "post_id_without_secret": {"form": {"client_id": s.client_id}},
        "none": {},
    }


@pytest.mark.parametrize("way", ["basic_wrong_secret", "basic_unknown_client", "post_wrong_secret",
                                 "post_unknown_client", "post_id_without_secret", "none"])
@pytest.mark.parametrize("endpoint", ["/oauth/revoke", "/oauth/introspect"])
async def test_bad_client_credentials_are_invalid_client_and_revoke_nothing(server, endpoint, way):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    attempt = bad_credentials(s)[way]
    for token in (t["refreshToken"], t["accessToken"]):
        r = await server.client.post(endpoint, form={"token": token, **attempt.get("form", {})},
                                     headers=attempt.get("headers"))
        assert r.status == 401, (r.status, r.text)
        assert r.json["error"] == "invalid_client"
        if "headers" in attempt:  # RFC 6749 5.2: a failed Authorization header gets a challenge
            assert r.headers.get("WWW-Authenticate", "").lower().startswith("basic")
    await assert_works_at_me(server, t["accessToken"])
    assert (await refresh(server, t["refreshToken"], s.client_id, s.client_secret)).status == 200


@pytest.mark.parametrize("auth", ["client_secret_basic", "client_secret_post"])
@pytest.mark.parametrize("endpoint", ["/oauth/revoke", "/oauth/introspect"])
async def test_missing_token_is_invalid_request(server, endpoint, auth):
    s = await full_setup(server)
    r = await rfc_post(server, endpoint, s, auth)
    assert r.status == 400, r.text
    assert r.json["error"] == "invalid_request"
    r = await rfc_post(server, endpoint, s, auth, token="")
    assert r.status == 400 and r.json["error"] == "invalid_request"


@pytest.mark.parametrize("endpoint", ["/oauth/revoke", "/oauth/introspect"])
async def test_client_secret_in_the_query_string_is_refused(server, endpoint):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    r = await server.client.post(f"{endpoint}?client_id={s.client_id}&client_secret={quote(s.client_secret)}",
                                 form={"token": t["refreshToken"]})
    assert r.status in (400, 401), r.text
    assert r.json["error"] in ("invalid_request", "invalid_client")
    assert (await refresh(server, t["refreshToken"], s.client_id, s.client_secret)).status == 200


# ---- POST /oauth/introspect (RFC 7662) ---------------------------------------------------------------------

@pytest.mark.parametrize("auth", ["client_secret_basic", "client_secret_post"])
async def test_introspecting_a_live_access_token(server, auth):
    s = await full_setup(server)
    access = (await tokens_for(server, s, ["userinfo", "chat.read"]))["accessToken"]
    claims = claims_of(access)
    answer = await introspect(server, s, access, auth)
    assert set(answer) == ACCESS_INTROSPECTION_FIELDS
    assert answer["active"] is True and answer["token_type"] == "Bearer"
    assert sorted(answer["scope"].split(" ")) == ["chat.read", "userinfo"]
    assert answer["client_id"] == s.client_id and answer["sub"] == s.user["userId"]
    assert answer["iat"] == START_TIME and answer["exp"] == START_TIME + ACCESS_TTL
    assert answer["iss"] == server.settings.issuer
    assert answer["aud"] == server.settings.audience or server.settings.audience in answer["aud"]
    assert answer["jti"] == claims["jti"]


@pytest.mark.parametrize("auth", ["client_secret_basic", "client_secret_post"])
async def test_introspecting_a_live_refresh_token(server, auth):
    s = await full_setup(server)
    server.clock.advance(10)
    refresh_token = (await tokens_for(server, s, ["userinfo", "chat.read"]))["refreshToken"]
    answer = await introspect(server, s, refresh_token, auth)
    assert answer["active"] is True and answer["token_type"] == "refresh_token"
    assert answer["client_id"] == s.client_id and answer["sub"] == s.user["userId"]
    assert sorted(answer["scope"].split(" ")) == ["chat.read", "userinfo"]
    assert answer["exp"] == START_TIME + 10 + REFRESH_TTL
    assert answer.get("iat", START_TIME + 10) == START_TIME + 10


@pytest.mark.parametrize("token", ["lba_rt_" + "A" * 43, "lba_at_e30.e30.c2ln", "whatever", "lba_ac_" + "D" * 43])
async def test_introspecting_an_unknown_token_is_inactive(server, token):
    s = await full_setup(server)
    assert await introspect(server, s, token) == {"active": False}


async def test_introspecting_a_user_token_or_a_code_is_inactive(server):
    s = await full_setup(server)
    assert await introspect(server, s, s.token) == {"active": False}
    assert await introspect(server, s, await code_for(server, s)) == {"active": False}


async def test_introspecting_an_expired_access_token_is_inactive(server):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    server.clock.advance(ACCESS_TTL - 1)
    assert (await introspect(server, s, t["accessToken"]))["active"] is True
    server.clock.advance(2)
    assert await introspect(server, s, t["accessToken"]) == {"active": False}
    assert (await introspect(server, s, t["refreshToken"]))["active"] is True


async def test_introspecting_an_expired_refresh_token_is_inactive(server):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    server.clock.advance(REFRESH_TTL + 1)
    assert await introspect(server, s, t["refreshToken"]) == {"active": False}


async def test_introspecting_tokens_revoked_by_rfc_7009_is_inactive(server):
    s = await full_setup(server)
    first, second = await tokens_for(server, s), await tokens_for(server, s)
    assert_revoke_ok(await revoke_token(server, s, first["accessToken"]))
    assert await introspect(server, s, first["accessToken"]) == {"active": False}
    assert (await introspect(server, s, second["accessToken"]))["active"] is True

    assert_revoke_ok(await revoke_token(server, s, second["refreshToken"]))
    assert await introspect(server, s, second["refreshToken"]) == {"active": False}
    assert await introspect(server, s, second["accessToken"]) == {"active": False}


async def test_introspecting_after_the_user_revokes_the_app_is_inactive_at_once(server):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    assert (await introspect(server, s, t["accessToken"]))["active"] is True
    assert (await revoke_app(server, s.token, s.client_id)).status == 200
    assert await introspect(server, s, t["accessToken"]) == {"active": False}
    assert await introspect(server, s, t["refreshToken"]) == {"active": False}


async def test_introspecting_another_clients_tokens_is_inactive(server):
    s = await full_setup(server)
    t = await second_app(server, s)
    theirs = await tokens_for(server, t)
    assert await introspect(server, s, theirs["accessToken"]) == {"active": False}
    assert await introspect(server, s, theirs["refreshToken"]) == {"active": False}
    assert (await introspect(server, t, theirs["accessToken"]))["active"] is True
    assert (await introspect(server, t, theirs["refreshToken"]))["active"] is True


async def test_introspection_ignores_the_token_type_hint(server):
    s = await full_setup(server)
    t = await tokens_for(server, s)
    assert (await introspect(server, s, t["accessToken"], token_type_hint="refresh_token"))["active"] is True
    assert (await introspect(server, s, t["refreshToken"], token_type_hint="access_token"))["active"] is True


# ---- metadata (RFC 8414) ------------------------------------------------------------------------------------

async def test_metadata_advertises_revocation_and_introspection_endpoints_that_work(server):
    meta = (await server.client.get("/.well-known/oauth-authorization-server")).json
    s = await full_setup(server)
    t = await tokens_for(server, s)
    for name, path in (("revocation_endpoint", "/oauth/revoke"), ("introspection_endpoint", "/oauth/introspect")):
        url = urlsplit(meta[name])
        assert url.scheme in ("http", "https") and url.netloc, meta[name]
        assert url.path.endswith(path) and not url.query and not url.fragment
        methods = meta.get(f"{name}_auth_methods_supported")
        if methods is not None:  # RFC 8414 2: if omitted, the default is client_secret_basic
            assert {"client_secret_basic", "client_secret_post"} <= set(methods)

    r = await server.client.post(meta["introspection_endpoint"], form={"token": t["accessToken"]},
                                 headers=basic(s.client_id, s.client_secret))
    assert r.status == 200 and r.json["active"] is True
    r = await server.client.post(meta["revocation_endpoint"], form={"token": t["accessToken"]},
                                 headers=basic(s.client_id, s.client_secret))
    assert_revoke_ok(r)
    await assert_revoked_at_me(server, t["accessToken"])


# ---- lbauth apps test-webhook ------------------------------------------------------------------------------

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

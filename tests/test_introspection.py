"""POST /oauth/introspect (RFC 7662, contract 11): a client asks whether its token is active;
anything else, or anything revoked or expired, is `{"active": false}`."""

from __future__ import annotations

import pytest

from tests.conftest import START_TIME
from tests.flow_helpers import code_for, full_setup, tokens_for
from tests.revocation_helpers import (
    ACCESS_INTROSPECTION_FIELDS,
    ACCESS_TTL,
    REFRESH_TTL,
    assert_revoke_ok,
    introspect,
    revoke_app,
    revoke_token,
    second_app,
)
from tests.support import unverified_claims

# ---- POST /oauth/introspect (RFC 7662) ------------------------------------------------------------------

@pytest.mark.parametrize("auth", ["client_secret_basic", "client_secret_post"])
async def test_introspecting_a_live_access_token(server, auth):
    s = await full_setup(server)
    access = (await tokens_for(server, s, ["userinfo", "chat.read"]))["accessToken"]
    claims = unverified_claims(access)
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
    assert answer["active"] is True and "token_type" not in answer  # RFC 7662 2.2 types access tokens
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

"""POST /oauth/revoke (RFC 7009, contract 11): a client revokes its refresh or access token; the
answer is 200 `{}` whatever the token was."""

from __future__ import annotations

import pytest

from tests.flow_helpers import full_setup, refresh, tokens_for
from tests.revocation_helpers import (
    assert_revoke_ok,
    assert_revoked_at_me,
    assert_works_at_me,
    authorizations,
    introspect,
    revoke_app,
    revoke_token,
    second_app,
)

# ---- POST /oauth/revoke (RFC 7009) ----------------------------------------------------------------------

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

"""The revocation feed, GET /api/oauth/revocations (contract section 7): the check-list offline
verifiers follow, without credentials; cursors, ETags and entries that expire with the tokens they
cover."""

from __future__ import annotations

import pytest

from tests.conftest import START_TIME
from tests.flow_helpers import code_for, full_setup, tokens_for
from tests.revocation_helpers import (
    ACCESS_TTL,
    VERIFIER_LEEWAY,
    assert_revoke_ok,
    feed,
    iso,
    me,
    parse_iso,
    revoke_app,
    revoke_token,
    second_app,
)
from tests.support import unverified_claims

# ---- GET /api/oauth/revocations -------------------------------------------------------------------------

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
    gid = unverified_claims((await tokens_for(server, s))["accessToken"])["gid"]
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
    claims = unverified_claims(access)
    server.clock.advance(100)
    assert_revoke_ok(await revoke_token(server, s, access))
    (item,) = (await feed(server)).data["items"]
    assert item == {"jti": claims["jti"], "revokedAt": iso(START_TIME + 100),
                    "expiresAt": iso(claims["exp"] + VERIFIER_LEEWAY)}


async def test_feed_since_the_returned_cursor_gives_only_later_entries(server):
    s = await full_setup(server)
    t = await second_app(server, s)
    first_gid = unverified_claims((await tokens_for(server, s))["accessToken"])["gid"]
    second_gid = unverified_claims((await tokens_for(server, t))["accessToken"])["gid"]

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

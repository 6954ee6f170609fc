"""Rate limits (issue 7): token endpoints per client and per source address, password logins per
account and per source address; 429 `request.rate_limited` with Retry-After, and recovery once the
window has passed. On by default; LBAUTH_RATE_LIMITS sets them (tests use small limits)."""

from __future__ import annotations

import pytest

from lbauth.settings import SettingsError
from lbauth.settings import load as load_settings
from tests.conftest import start_server
from tests.flow_helpers import full_setup, refresh, tokens_for


@pytest.fixture
async def limited(tmp_path, database_url):
    srv = await start_server(tmp_path, database_url,
                             rate_limits="login-account=3/60,login-address=8/60,token-client=5/10,token-address=9/10")
    yield srv
    srv.client.close()
    await srv.running.stop()


async def test_a_burst_of_logins_to_one_account_is_slowed_and_recovers(limited):
    user = await limited.create_user()
    attempts = [await limited.client.post("/api/auth/login", json={"email": user["email"], "password": "wrong"})
                for _ in range(4)]
    assert [r.status for r in attempts[:3]] == [401, 401, 401]
    attempts[3].assert_error(429, "request.rate_limited")
    retry_after = int(attempts[3].headers["Retry-After"])
    assert 1 <= retry_after <= 60
    # Even the right password waits: the limit is on tries, not on failures.
    right = {"email": user["email"], "password": user["password"]}
    (await limited.client.post("/api/auth/login", json=right)).assert_error(429, "request.rate_limited")
    limited.clock.advance(retry_after)
    assert (await limited.client.post("/api/auth/login", json=right)).status == 200


async def test_logins_are_limited_per_source_address(limited):
    """Eight tries from one address, spread over accounts, then the ninth is refused."""
    statuses = []
    for i in range(9):
        r = await limited.client.post("/api/auth/login", json={"email": f"nobody{i}@example.com", "password": "x"})
        statuses.append(r.status)
    assert statuses == [401] * 8 + [429]


async def test_token_requests_are_limited_per_client(limited):
    s = await full_setup(limited)
    tokens = await tokens_for(limited, s)  # one token request (the exchange)
    answers = [await refresh(limited, tokens["refreshToken"], s.client_id, s.client_secret) for _ in range(5)]
    assert [r.status for r in answers[:4]] == [200] * 4
    answers[4].assert_error(429, "request.rate_limited")
    assert 1 <= int(answers[4].headers["Retry-After"]) <= 10
    # Another client from the same address is not held back by the first one's limit.
    other = await full_setup(limited)
    assert (await tokens_for(limited, other))["accessToken"]
    limited.clock.advance(10)
    assert (await refresh(limited, tokens["refreshToken"], s.client_id, s.client_secret)).status == 200


async def test_token_requests_are_limited_per_source_address(limited):
    clients = [await full_setup(limited) for _ in range(3)]
    statuses = []
    for s in clients:  # 3 requests per client: under the per-client limit, 9 in all from one address
        for _ in range(3):
            statuses.append((await refresh(limited, "lba_rt_unknown", s.client_id, s.client_secret)).status)
    assert statuses == [400] * 9
    (await refresh(limited, "lba_rt_unknown", clients[0].client_id, clients[0].client_secret)).assert_error(
        429, "request.rate_limited")


def test_the_setting_takes_on_off_or_overrides():
    assert load_settings({"rate_limits": "off"}, environ={}).rate_limits is False
    assert load_settings({}, environ={}).rate_limits is True
    assert load_settings({}, environ={"LBAUTH_RATE_LIMITS": "login-account=5/60"}).rate_limits == (
        ("login-account", 5, 60),)
    with pytest.raises(SettingsError, match="--rate-limits"):
        load_settings({"rate_limits": "logins=5"}, environ={})

"""Rate limits (issue 7): token endpoints per client and per source address, password logins per
account and per source address; 429 `request.rate_limited` with Retry-After, and recovery once the
window has passed. On by default; LBAUTH_RATE_LIMITS sets them (tests use small limits)."""

from __future__ import annotations

import pytest

from lbauth.clock import FrozenClock
from lbauth.core.ratelimit import RateLimiter
from lbauth.errors import RateLimited
from lbauth.settings import SettingsError
from lbauth.settings import load as load_settings
from tests.conftest import running_server
from tests.flow_helpers import full_setup, refresh, tokens_for


@pytest.fixture
async def limited(tmp_path, database_url):
    async with running_server(tmp_path, database_url, rate_limits="login-account=3/60,login-address=8/60,"
                                                                  "token-client=5/10,token-address=9/10") as srv:
        yield srv


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


# ---- the limiter's memory under a flood of made-up keys ----------------------------------------------------

def _limiter(**limits: tuple[int, int]) -> RateLimiter:
    limiter = RateLimiter(FrozenClock(1_000_000), tuple((kind, n, s) for kind, (n, s) in limits.items()))
    limiter.MAX_KEYS = 1_000  # the server's bound is 100,000; the behaviour at the bound is the same
    return limiter


def _refused(limiter: RateLimiter, kind: str, subject: str) -> bool:
    try:
        limiter.hit(kind, subject)
    except RateLimited:
        return True
    return False


def test_a_flood_of_made_up_client_ids_and_addresses_does_not_reset_password_guesses():
    """Client ids and IPv6 addresses are anyone's to invent: filling the limiter with them once
    emptied it, password-guess counts included."""
    limiter = _limiter(**{"login-account": (3, 60)})
    assert [_refused(limiter, "login-account", "victim@example.com") for _ in range(3)] == [False] * 3
    for n in range(3_000):
        _refused(limiter, "token-client", f"cid_made_up_{n}")
        _refused(limiter, "login-address", f"2001:db8:{n:x}::1")
    assert _refused(limiter, "login-account", "victim@example.com")


def test_a_full_table_forgets_the_least_recently_counted_subject_first():
    limiter = _limiter(**{"login-account": (3, 60)})
    for _ in range(3):
        limiter.hit("login-account", "victim@example.com")
    for n in range(999):  # the table is now full: 1,000 subjects
        limiter.hit("login-account", f"other-{n}@example.com")
    assert _refused(limiter, "login-account", "victim@example.com")  # counted last: still known
    for n in range(999, 1_999):  # 1,000 new subjects push out every older one, one at a time
        limiter.hit("login-account", f"other-{n}@example.com")
    assert not _refused(limiter, "login-account", "victim@example.com")


def test_ipv6_addresses_are_counted_per_64_and_ipv4_mapped_ones_as_ipv4():
    limiter = _limiter(**{"login-address": (4, 60)})
    assert [_refused(limiter, "login-address", f"2001:db8:1:2::{n:x}") for n in range(1, 6)] == [False] * 4 + [True]
    assert not _refused(limiter, "login-address", "2001:db8:1:3::1")  # the next /64 is someone else
    assert [_refused(limiter, "login-address", a) for a in ("192.0.2.7", "::ffff:192.0.2.7", "192.0.2.7",
                                                            "::ffff:192.0.2.7", "192.0.2.7")] == [False] * 4 + [True]


async def test_junk_requests_naming_a_client_do_not_hold_back_its_real_users(limited):
    """The per-client count is taken before the client is authenticated (a public client never
    is): a caller sending junk in a client's name is limited, from its own address only."""
    s = await full_setup(limited)
    tokens = await tokens_for(limited, s)
    junk = [(await limited.client.post("/api/oauth/token/refresh", source="127.0.0.2", form={
        "grant_type": "refresh_token", "refresh_token": "lba_rt_junk", "client_id": s.client_id,
        "client_secret": "wrong"})).status for _ in range(6)]
    assert junk == [401] * 5 + [429]
    assert (await refresh(limited, tokens["refreshToken"], s.client_id, s.client_secret)).status == 200

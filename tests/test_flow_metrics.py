"""The metrics of the accounts' and devices' flows at GET /metrics: sign-ups and password resets by
step, second steps by method and outcome, device grants by step, DPoP refusals by reason; each
moved by the real flow over HTTP."""

from __future__ import annotations

import pytest

from lbauth import errors
from lbauth.metrics import dpop_reason
from tests.conftest import running_server
from tests.dpop_keys import DPoPKey
from tests.flow_helpers import PageSession, full_setup
from tests.mailbox import link_in
from tests.test_device_grant import answer, poll, started
from tests.test_dpop import browser_code, exchange, token_request, token_url
from tests.test_metrics import scrape, value
from tests.test_second_factors import enrolled, oathtool, password_step, requires_oathtool, second_step
from tests.test_signup_recovery import NEW_PASSWORD, delivered, new_address, reset, sign_up, token_of

METRICS_TOKEN = "metrics-token-for-the-flow-tests-0123"


class Moves:
    """What a scrape before and one after say moved."""

    def __init__(self, server, bearer: str | None = None) -> None:
        self.server, self.bearer = server, bearer
        self.before: dict = {}

    async def __aenter__(self) -> Moves:
        self.before = await scrape(self.server, self.bearer)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.after = await scrape(self.server, self.bearer)

    def __call__(self, name: str, **labels: str) -> float:
        return value(self.after, name, **labels) - value(self.before, name, **labels)


async def test_sign_ups_and_password_resets_are_counted_by_step(tmp_path, database_url, mailbox):
    async with running_server(tmp_path, database_url, smtp_url=mailbox.url, signup="open",
                              metrics_token=METRICS_TOKEN) as srv:
        email = new_address()
        async with Moves(srv, METRICS_TOKEN) as moved:
            assert (await sign_up(srv, email)).status == 202
            link = link_in(await mailbox.next(to=email), "lba_su_")
            assert (await PageSession(srv).get(link)).status == 303  # the account made
            assert (await srv.client.post("/api/auth/password/forgot", json={"email": email})).status == 202
            assert (await srv.client.post("/api/auth/password/forgot", json={"email": new_address()})).status == 202
            reset_link = link_in(await mailbox.next(to=email), "lba_pr_")
            assert (await reset(srv, token_of(reset_link), NEW_PASSWORD)).status == 200
            assert (await reset(srv, token_of(reset_link), NEW_PASSWORD)).status != 200  # used: not counted
            await delivered(srv)
        assert moved("lbauth_signups_total", step="requested") == 1
        assert moved("lbauth_signups_total", step="completed") == 1
        assert moved("lbauth_password_resets_total", step="requested") == 2  # any address: the answer is the same
        assert moved("lbauth_password_resets_total", step="completed") == 1


@requires_oathtool
async def test_second_steps_are_counted_by_method_and_outcome(tmp_path, database_url):
    async with running_server(tmp_path, database_url, env="development") as srv:
        user, _, secret, recovery_codes = await enrolled(srv)
        async with Moves(srv) as moved:
            step = await password_step(srv, user)
            wrong = str((int(oathtool(secret, srv.clock.now())) + 1) % 1_000_000).zfill(6)
            assert (await second_step(srv, step["mfaToken"], "totp", wrong)).status == 401
            assert (await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now()))).status == 200
            step = await password_step(srv, user)
            assert (await second_step(srv, step["mfaToken"], "recovery_code", recovery_codes[0])).status == 200
            assert (await second_step(srv, step["mfaToken"], "sms", "123456")).status == 400  # no such method
        assert moved("lbauth_second_steps_total", method="totp", outcome="failed") == 1
        assert moved("lbauth_second_steps_total", method="totp", outcome="succeeded") == 1
        assert moved("lbauth_second_steps_total", method="recovery_code", outcome="succeeded") == 1
        assert not any(labels for (name, labels) in moved.after if name == "lbauth_second_steps_total"
                       and ("method", "sms") in labels)


@pytest.fixture
async def server(tmp_path, database_url):
    """lbauth in development: /metrics open."""
    async with running_server(tmp_path, database_url, env="development") as srv:
        yield srv


async def test_device_grants_are_counted_by_step(server):
    setup = await full_setup(server, device=True)
    async with Moves(server) as moved:
        approved = await started(server, setup)
        await answer(server, setup, approved["user_code"], "approve")
        assert (await poll(server, setup, approved["device_code"])).status == 200
        denied = await started(server, setup)
        await answer(server, setup, denied["user_code"], "deny")
        assert (await poll(server, setup, denied["device_code"])).status == 400
    assert moved("lbauth_device_grants_total", step="started") == 2
    assert moved("lbauth_device_grants_total", step="approved") == 1
    assert moved("lbauth_device_grants_total", step="denied") == 1
    assert moved("lbauth_device_grants_total", step="tokens_issued") == 1
    assert moved("lbauth_tokens_issued_total", grant_type="urn:ietf:params:oauth:grant-type:device_code") == 1


async def test_dpop_refusals_are_counted_by_reason(server):
    setup = await full_setup(server)
    key, url = DPoPKey(), token_url(server)
    async with Moves(server) as moved:
        r = await exchange(server, setup, await browser_code(server, setup), key)
        assert r.status == 200, r.text
        access_token = r.json["access_token"]
        me = server.url + "/api/auth/me"
        proof = key.proof("GET", me, server.clock.now(), access_token=access_token)
        bound = {"Authorization": f"DPoP {access_token}"}
        assert (await server.client.get("/api/auth/me", headers={**bound, "DPoP": proof})).status == 200
        assert (await server.client.get("/api/auth/me", headers={**bound, "DPoP": proof})).status == 401  # replayed
        assert (await server.client.get("/api/auth/me", bearer=access_token)).status == 401  # bearer_scheme
        assert (await server.client.get("/api/auth/me", headers=bound)).status == 401  # missing
        other = DPoPKey().proof("GET", me, server.clock.now(), access_token=access_token)
        assert (await server.client.get("/api/auth/me", headers={**bound, "DPoP": other})).status == 401  # wrong_key
        for proofs in ([key.proof("GET", url, server.clock.now())],  # wrong_request
                       [key.proof("POST", url, server.clock.now() - 61)],  # stale
                       ["not.a.proof"]):  # malformed
            r = await token_request(server, {"grant_type": "refresh_token", "refresh_token": "lba_rt_x"},
                                    client=(setup.client_id, setup.client_secret), proofs=proofs)
            assert r.status == 400 and r.json["error"] == "invalid_dpop_proof", r.text
    for reason in ("replayed", "bearer_scheme", "missing", "wrong_key", "wrong_request", "stale", "malformed"):
        assert moved("lbauth_dpop_refusals_total", reason=reason) == 1, reason
    assert moved("lbauth_refusals_total", sub_code="oauth2.dpop.invalid_proof") == 6


@pytest.mark.parametrize(("message", "reason"), [
    ("A DPoP proof is required: send one in the DPoP header.", "missing"),
    ("Send exactly one DPoP header.", "missing"),
    ("This refresh token is DPoP-bound: send a DPoP proof.", "missing"),
    ("This app's tokens are all DPoP-bound: send a DPoP proof.", "missing"),
    ("This DPoP proof was used before: make a new one for every request.", "replayed"),
    ("The DPoP proof is made with another key than this refresh token's.", "wrong_key"),
    ("The DPoP proof is signed by another key than the one the access token is bound to.", "wrong_key"),
    ("This code is bound to a DPoP key (dpop_jkt, or the app's setting): send a DPoP proof made with it.",
     "wrong_key"),
    ("The DPoP proof's htm is not the method of this request.", "wrong_request"),
    ("The DPoP proof's htu is not the URL of this request.", "wrong_request"),
    ("The DPoP proof's iat is not within 60 seconds of this server's time.", "stale"),
    ("The DPoP proof's ath is missing or is not the hash of the access token it came with.", "access_token_hash"),
    ("The DPoP proof's nonce is not the one this server gave.", "nonce"),
    ("The DPoP proof's signature does not verify with the key in its header.", "signature"),
    ("The DPoP proof's typ is not dpop+jwt.", "malformed"),
    ("The DPoP proof's jwk holds a private key: it must hold the public key only.", "malformed"),
])
def test_dpop_reasons(message, reason):
    assert dpop_reason(errors.DPoPProofRefused(message)) == reason
    assert dpop_reason(errors.DPoPBoundTokenAsBearer()) == "bearer_scheme"

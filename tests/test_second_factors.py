"""Second factors (TOTP, recovery codes, the second step at sign-in and at password reset) end to
end on both databases. TOTP codes come from Debian's `oathtool` at the frozen clock's time, never
from lbauth's own code."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from datetime import UTC, datetime

import pytest

from lbauth.core.accounts import links
from lbauth.core.accounts.links import LinkKind
from lbauth.core.mail import outbox
from tests.conftest import TestServer, running_server
from tests.flow_helpers import (
    REGISTERED_URI,
    PageSession,
    Setup,
    code_for,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    refresh,
)
from tests.support import unverified_claims
from tests.test_secrets_at_rest import _bytes_at_rest

PASSWORD = "correct horse battery"
NEW_PASSWORD = "seven silver spoons in a drawer"

requires_oathtool = pytest.mark.skipif(shutil.which("oathtool") is None and not os.environ.get("CI"),
                                       reason="needs Debian's oathtool (make test installs it as root)")
pytestmark = requires_oathtool


def oathtool(secret: str, when: float) -> str:
    """The TOTP code of `secret` at Unix time `when`, as Debian's oathtool computes it."""
    moment = datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    done = subprocess.run(["oathtool", "--totp", "-b", "--now", moment, secret], capture_output=True, text=True,
                          check=True, timeout=10)
    return done.stdout.strip()


async def enrolled(srv: TestServer) -> tuple[dict, str, str, list[str]]:
    """A user with a confirmed TOTP authenticator: (user, user token, secret, recovery codes). The
    clock is moved on a step, so the code used to confirm is not the current one."""
    user = await srv.create_user()
    token = await srv.login(user["email"], user["password"])
    r = await srv.client.post("/api/account/security/totp", bearer=token)
    assert r.status == 200, r.text
    secret = r.data["secret"]
    r = await srv.client.post("/api/account/security/totp/confirm", json={"code": oathtool(secret, srv.clock.now())},
                              bearer=token)
    assert r.status == 200, r.text
    srv.clock.advance(30)
    return user, token, secret, r.data["recoveryCodes"]


async def password_step(srv: TestServer, user: dict) -> dict:
    r = await srv.client.post("/api/auth/login", json={"email": user["email"], "password": user["password"]})
    assert r.status == 200, r.text
    return r.data


async def second_step(srv: TestServer, mfa_token: str, method: str, code: str):
    return await srv.client.post("/api/auth/login/mfa", json={"mfaToken": mfa_token, "method": method, "code": code})


# ---- enrolment ----------------------------------------------------------------------------------------

async def test_enrolment_shows_the_secret_a_qr_code_and_ten_recovery_codes_once(server):
    srv = server
    user = await srv.create_user()
    token = await srv.login(user["email"], user["password"])
    r = await srv.client.get("/api/account/security", bearer=token)
    assert r.data == {"passkeys": [], "totp": False, "recoveryCodesLeft": 0}

    r = await srv.client.post("/api/account/security/totp", bearer=token)
    assert r.status == 200, r.text
    secret = r.data["secret"]
    assert re.fullmatch(r"[A-Z2-7]{32}", secret)
    assert r.data["otpauthUri"] == (f"otpauth://totp/lbauth:{user['email']}?secret={secret}&issuer=lbauth"
                                    "&algorithm=SHA1&digits=6&period=30")
    assert r.data["qrSvg"].startswith("<svg") and "</svg>" in r.data["qrSvg"]
    # Not confirmed yet: sign-in is still the password alone.
    assert "token" in await password_step(srv, user)

    wrong = str((int(oathtool(secret, srv.clock.now())) + 1) % 1_000_000).zfill(6)
    r = await srv.client.post("/api/account/security/totp/confirm", json={"code": wrong}, bearer=token)
    r.assert_error(401, "auth.mfa.failed")
    r = await srv.client.post("/api/account/security/totp/confirm", json={"code": oathtool(secret, srv.clock.now())},
                              bearer=token)
    assert r.status == 200, r.text
    codes = r.data["recoveryCodes"]
    assert r.data["totp"] is True and len(codes) == 10 and len(set(codes)) == 10
    assert all(re.fullmatch(r"[a-z2-9]{4}-[a-z2-9]{4}-[a-z2-9]{2}", c) for c in codes)
    r = await srv.client.get("/api/account/security", bearer=token)
    assert r.data == {"passkeys": [], "totp": True, "recoveryCodesLeft": 10}
    # A second authenticator while one is set up: refused.
    r = await srv.client.post("/api/account/security/totp", bearer=token)
    r.assert_error(409, "account.totp.exists")


# ---- the second step at sign-in -------------------------------------------------------------------------

async def test_sign_in_asks_for_the_second_step_and_refuses_a_code_used_twice(server):
    srv = server
    user, _, secret, _ = await enrolled(srv)
    step = await password_step(srv, user)
    assert step["mfaRequired"] is True and step["mfaToken"].startswith("lba_mt_") and "token" not in step
    assert step["methods"] == ["totp", "recovery_code"]

    code = oathtool(secret, srv.clock.now())
    r = await second_step(srv, step["mfaToken"], "totp", code)
    assert r.status == 200, r.text
    assert r.data["token"].startswith("lba_ut_") and r.data["expiresIn"] > 0
    me = await srv.client.get("/api/account/security", bearer=r.data["token"])
    assert me.status == 200
    session = await srv.db.read(lambda conn: _session_amr(conn, user["userId"]))
    assert "pwd otp mfa" in session

    # The same code again (same time step), with a fresh pending step: refused.
    again = await password_step(srv, user)
    (await second_step(srv, again["mfaToken"], "totp", code)).assert_error(401, "auth.mfa.failed")
    # The mfaToken already used: refused even with a good code.
    srv.clock.advance(30)
    (await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now()))).assert_error(
        401, "auth.mfa.failed")


def _session_amr(conn, user_id: str) -> list[str]:
    from sqlalchemy import select

    from lbauth.storage.models import sessions
    return [row[0] for row in conn.execute(select(sessions.c.amr).where(sessions.c.user_id == user_id))]


async def test_a_password_change_voids_a_second_step_begun_with_the_old_password(server):
    """Someone who has the old password and is at the second step gets nothing once the owner
    changes it: the pending step is void (as every other session is ended)."""
    srv = server
    user, token, secret, codes = await enrolled(srv)
    pending = await password_step(srv, user)
    changed = await srv.client.post("/api/account/password", bearer=token,
                                    json={"currentPassword": user["password"],
                                          "newPassword": "a brand new passphrase 42"})
    assert changed.status == 200, changed.text
    r = await second_step(srv, pending["mfaToken"], "recovery_code", codes[0])
    r.assert_error(401, "auth.mfa.failed")
    r = await second_step(srv, pending["mfaToken"], "totp", oathtool(secret, srv.clock.now()))
    r.assert_error(401, "auth.mfa.failed")


async def test_a_wrong_password_says_nothing_about_factors(server):
    srv = server
    user, _, _, _ = await enrolled(srv)
    r = await srv.client.post("/api/auth/login", json={"email": user["email"], "password": "not the password at all"})
    plain = await srv.create_user()
    r2 = await srv.client.post("/api/auth/login", json={"email": plain["email"], "password": "not the password at all"})
    assert (r.status, r.json) == (r2.status, r2.json) == (401, r2.json)
    r.assert_error(401, "auth.login.failed")


async def test_codes_one_step_either_side_pass_and_two_steps_old_are_refused(server):
    srv = server
    user, _, secret, _ = await enrolled(srv)
    srv.clock.advance(300)
    step = await password_step(srv, user)
    (await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now() - 60))).assert_error(
        401, "auth.mfa.failed")
    r = await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now() - 30))
    assert r.status == 200, r.text
    srv.clock.advance(30)
    step = await password_step(srv, user)  # the next step's code (now + 30) is taken as well
    r = await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now() + 30))
    assert r.status == 200, r.text


async def test_five_wrong_tries_then_rate_limited(tmp_path, database_url):
    async with running_server(tmp_path, database_url, rate_limits="on") as srv:
        user, _, secret, _ = await enrolled(srv)
        step = await password_step(srv, user)
        for _ in range(5):
            (await second_step(srv, step["mfaToken"], "totp", "000000")).assert_error(401, "auth.mfa.failed")
        r = await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now()))
        r.assert_error(429, "request.rate_limited")
        assert int(r.headers["Retry-After"]) > 0
        srv.clock.advance(300)
        step = await password_step(srv, user)
        assert (await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now()))).status == 200


async def test_a_recovery_code_works_once_and_sends_a_notice(server):
    srv = server
    user, _, _, codes = await enrolled(srv)
    step = await password_step(srv, user)
    typed = codes[0].upper().replace("-", "")  # any case, with or without the dashes
    r = await second_step(srv, step["mfaToken"], "recovery_code", typed)
    assert r.status == 200, r.text
    kinds = [m.kind for m in await outbox.list_messages(srv.db) if m.recipient == user["email"]]
    assert "recovery_code_used_notice" in kinds

    step = await password_step(srv, user)
    (await second_step(srv, step["mfaToken"], "recovery_code", codes[0])).assert_error(401, "auth.mfa.failed")
    r = await srv.client.get("/api/account/security", bearer=r.data["token"])
    assert r.data["recoveryCodesLeft"] == 9


async def test_the_browser_sign_in_needs_the_second_step_before_any_session(server):
    srv = server
    setup = await full_setup(srv)
    user, _, secret, _ = await enrolled(srv)
    url = oauth_url(front_params(setup.client_id, setup.redirect_uri))
    browser = PageSession(srv)
    page = await browser.follow(await browser.get(url))
    form = page.login_form()
    assert form is not None
    answer = await browser.submit(page, form, {"email": user["email"], "password": user["password"]})
    assert answer.status == 200 and 'autocomplete="one-time-code"' in answer.response.text
    # The pending step rides in a signed cookie for /login/mfa only, never in the page.
    assert any(f.action == "/login/mfa" for f in answer.forms) and "lba_mt_" not in answer.response.text
    assert "mfaToken" not in answer.response.text and "lbauth_mfa" in browser.cookies
    # Straight to /oauth/ with only the password step done: still asked to sign in.
    page = await browser.follow(await browser.get(url))
    assert page.login_form() is not None

    answer = await browser.submit(page, page.login_form(), {"email": user["email"], "password": user["password"]})
    mfa_form = next(f for f in answer.forms if f.action == "/login/mfa")
    wrong = await browser.submit(answer, mfa_form, {"method": "totp", "code": "000000"})
    assert wrong.status == 401 and 'autocomplete="one-time-code"' in wrong.response.text
    mfa_form = next(f for f in wrong.forms if f.action == "/login/mfa")
    done = await browser.follow(await browser.submit(wrong, mfa_form, {"method": "totp",
                                                                       "code": oathtool(secret, srv.clock.now())}))
    assert done.login_form() is None and done.status in (200, 302, 303), done.text[:300]


# ---- removal, regeneration and a recent sign-in ---------------------------------------------------------

async def test_removal_and_regeneration_need_a_recent_sign_in(server):
    srv = server
    user, token, secret, _ = await enrolled(srv)
    srv.clock.advance(301)
    (await srv.client.delete("/api/account/security/totp", bearer=token)).assert_error(
        403, "auth.reauthentication.required")
    (await srv.client.post("/api/account/security/recovery-codes", bearer=token)).assert_error(
        403, "auth.reauthentication.required")

    step = await password_step(srv, user)
    fresh = (await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now()))).data["token"]
    r = await srv.client.post("/api/account/security/recovery-codes", bearer=fresh)
    assert r.status == 200 and len(r.data["recoveryCodes"]) == 10
    r = await srv.client.delete("/api/account/security/totp", bearer=fresh)
    assert r.status == 200, r.text
    r = await srv.client.get("/api/account/security", bearer=fresh)
    assert r.data == {"passkeys": [], "totp": False, "recoveryCodesLeft": 0}
    assert "token" in await password_step(srv, user)  # the password alone again
    kinds = [m.kind for m in await outbox.list_messages(srv.db) if m.recipient == user["email"]]
    assert {"factor_added_notice", "factor_removed_notice"} <= set(kinds)


# ---- at rest, operators, password reset -----------------------------------------------------------------

async def test_the_totp_secret_is_not_in_the_bytes_at_rest(server, database_url, backend):
    srv = server
    _, _, secret, _ = await enrolled(srv)
    raw = await _bytes_at_rest(srv, database_url, backend)
    assert secret.encode() not in raw and secret.lower().encode() not in raw


async def test_operators_reset_factors_and_end_every_session(server, cli):
    srv = server
    user, token, _, _ = await enrolled(srv)
    done = cli.json("users", "reset-factors", user["email"])
    assert done == {"userId": user["userId"], "email": user["email"], "status": "factors_reset"}
    (await srv.client.get("/api/account/security", bearer=token)).assert_error(401, "oauth2.token.revoked")
    assert "token" in await password_step(srv, user)
    assert cli("users", "reset-factors", "nobody@example.com", ok=False).returncode == 1


async def test_a_password_reset_of_a_user_with_totp_needs_the_code(dev_server):
    srv = dev_server
    user, _, secret, _ = await enrolled(srv)
    now = int(srv.clock.now())
    link = await srv.db.transaction(lambda conn: links.issue(conn, LinkKind.RESET, email=user["email"],
                                                             user_id=user["userId"], now=now))
    body = {"token": link, "newPassword": NEW_PASSWORD}
    (await srv.client.post("/api/auth/password/reset", json=body)).assert_error(401, "auth.mfa.failed")
    (await srv.client.post("/api/auth/password/reset", json={**body, "method": "totp", "code": "000000"})
     ).assert_error(401, "auth.mfa.failed")
    r = await srv.client.post("/api/auth/password/reset",
                              json={**body, "method": "totp", "code": oathtool(secret, srv.clock.now())})
    assert r.status == 200, r.text
    assert "mfaToken" in await password_step(srv, {**user, "password": NEW_PASSWORD})


async def test_with_mfa_required_a_user_without_a_factor_must_enrol_first(tmp_path, database_url):
    async with running_server(tmp_path, database_url, mfa="required") as srv:
        user = await srv.create_user()
        token = await srv.login(user["email"], user["password"])
        (await srv.client.get("/api/account/profile", bearer=token)).assert_error(403, "auth.mfa.enrolment_required")
        assert (await srv.client.get("/api/account/security", bearer=token)).status == 200
        secret = (await srv.client.post("/api/account/security/totp", bearer=token)).data["secret"]
        r = await srv.client.post("/api/account/security/totp/confirm", bearer=token,
                                  json={"code": oathtool(secret, srv.clock.now())})
        assert r.status == 200, r.text
        assert (await srv.client.get("/api/account/profile", bearer=token)).status == 200


async def test_tokens_after_a_second_step_say_so_and_a_refresh_keeps_it(server):
    """The session's amr goes into the code, the access token, the ID token and every refresh:
    acr urn:lbauth:acr:mfa (RFC 8176, RFC 9068 2.2.1), what a resource service demanding it checks."""
    srv = server
    user, _, secret, _ = await enrolled(srv)
    step = await password_step(srv, user)
    done = await second_step(srv, step["mfaToken"], "totp", oathtool(secret, srv.clock.now()))
    assert done.status == 200, done.text
    signed_in_at = int(srv.clock.now())
    app = await srv.create_app(user["email"], redirect_uris=[REGISTERED_URI])
    setup = Setup(user=user, token=done.data["token"], app=app)
    srv.clock.advance(10)
    code = await code_for(srv, setup, scope=("openid", "userinfo"))
    r = await exchange(srv, code, setup.redirect_uri, setup.client_id, setup.client_secret)
    assert r.status == 200, r.text
    for token in (r.data["accessToken"], r.data["idToken"]):
        claims = unverified_claims(token)
        assert (claims["amr"], claims["acr"], claims["auth_time"]) == (
            ["pwd", "otp", "mfa"], "urn:lbauth:acr:mfa", signed_in_at)
    again = await refresh(srv, r.data["refreshToken"], setup.client_id, setup.client_secret)
    assert again.status == 200, again.text
    assert unverified_claims(again.data["accessToken"])["acr"] == "urn:lbauth:acr:mfa"

"""Public clients (contract 17, first bullet): apps with no secret (`token_endpoint_auth_method`
none) authenticate with their `client_id` alone at /oauth/token and /oauth/revoke, must use PKCE
S256, may not use the envelope token endpoints nor introspection, and their refresh tokens rotate
with reuse detection (RFC 9700 4.14.2): a retired token more than 10 s after its rotation revokes
the grant, sooner it is only refused. Confidential apps are unchanged (their tests elsewhere)."""

from __future__ import annotations

import asyncio
import json

from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session

from tests.conftest import run_cli
from tests.flow_helpers import (
    REGISTERED_URI,
    PageSession,
    Setup,
    authorize,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    pkce_pair,
    redirect_query,
    refresh,
)
from tests.revocation_helpers import (
    assert_revoke_ok,
    assert_revoked_at_me,
    assert_works_at_me,
    authorizations,
    basic,
)

GRACE = 10  # contract 17: seconds a retired refresh token is only refused


async def public_setup(server, **options) -> Setup:
    setup = await full_setup(server, public=True, **options)
    assert setup.app["clientSecret"] is None
    return setup


async def public_tokens(server, setup: Setup, scope: str = "userinfo chat.read") -> dict:
    """Code with PKCE through authorize/external, then /oauth/token as a public client."""
    verifier, challenge = pkce_pair()
    r = await authorize(server, setup.token, setup.client_id, setup.redirect_uri, scope.split(),
                        codeChallenge=challenge, codeChallengeMethod="S256")
    assert r.status == 200, r.text
    r = await token(server, setup, grant_type="authorization_code", code=r.data["code"],
                    redirect_uri=setup.redirect_uri, code_verifier=verifier)
    assert r.status == 200, r.text
    return r.json


async def token(server, setup: Setup, **form: str):
    """POST /oauth/token with the client's id in the form and no secret (method none)."""
    return await server.client.post("/oauth/token", form={"client_id": setup.client_id, **form})


async def refreshed(server, setup: Setup, refresh_token: str):
    return await token(server, setup, grant_type="refresh_token", refresh_token=refresh_token)


def assert_invalid_grant(r) -> None:
    assert r.status == 400 and r.json["error"] == "invalid_grant", r.text


def assert_invalid_client(r) -> None:
    assert r.status == 401 and r.json["error"] == "invalid_client", r.text


# ---- the whole flow, with an off-the-shelf client -------------------------------------------------------

async def test_authlib_as_a_public_client_completes_code_pkce_and_rotating_refresh(server):
    setup = await public_setup(server)
    meta = (await server.client.get("/.well-known/oauth-authorization-server")).json
    assert "none" in meta["token_endpoint_auth_methods_supported"]
    assert "none" in meta["revocation_endpoint_auth_methods_supported"]
    assert "none" not in meta["introspection_endpoint_auth_methods_supported"]
    session = OAuth2Session(setup.client_id, None, scope="userinfo chat.read", redirect_uri=setup.redirect_uri,
                            code_challenge_method="S256", token_endpoint_auth_method="none")
    verifier = generate_token(48)
    url, _ = session.create_authorization_url(meta["authorization_endpoint"], code_verifier=verifier)
    browser = PageSession(server)
    consent = await browser.open_logged_in(url, setup.user["email"], setup.user["password"])
    landing = await browser.decide(consent, "approve")
    assert landing.status in (302, 303)

    first = await asyncio.to_thread(session.fetch_token, meta["token_endpoint"],
                                    authorization_response=landing.location, code_verifier=verifier)
    assert first["refresh_token"].startswith("lba_rt_") and first["scope"] == "userinfo chat.read"
    await assert_works_at_me(server, first["access_token"])

    second = await asyncio.to_thread(session.refresh_token, meta["token_endpoint"],
                                     refresh_token=first["refresh_token"])
    assert second["refresh_token"] != first["refresh_token"]  # rotated (contract 17)
    assert second["scope"] == "userinfo chat.read"
    await assert_works_at_me(server, second["access_token"])
    third = await asyncio.to_thread(session.refresh_token, meta["token_endpoint"],
                                    refresh_token=second["refresh_token"])
    assert third["refresh_token"] not in (first["refresh_token"], second["refresh_token"])
    await assert_works_at_me(server, third["access_token"])

    # The client revokes its own refresh token with its client_id alone (RFC 7009).
    r = await server.client.post("/oauth/revoke", form={"client_id": setup.client_id,
                                                        "token": third["refresh_token"]})
    assert_revoke_ok(r)
    assert_invalid_grant(await refreshed(server, setup, third["refresh_token"]))
    await assert_revoked_at_me(server, third["access_token"])


async def test_a_public_clients_refresh_keeps_the_grant_scopes_and_id_token(server):
    setup = await public_setup(server)
    first = await public_tokens(server, setup, "openid userinfo chat.read")
    assert "id_token" in first
    r = await token(server, setup, grant_type="refresh_token", refresh_token=first["refresh_token"], scope="userinfo")
    assert r.status == 200, r.text
    assert r.json["scope"] == "userinfo" and "id_token" not in r.json
    # The successor still carries the whole grant: a later refresh may ask for all of it again.
    r = await refreshed(server, setup, r.json["refresh_token"])
    assert r.status == 200, r.text
    assert r.json["scope"] == "openid userinfo chat.read" and "id_token" in r.json


# ---- client authentication --------------------------------------------------------------------------------

async def test_a_public_app_presenting_any_secret_is_refused(server):
    """A public app has no secret: whatever secret is sent, by either method, is a wrong one."""
    setup = await public_setup(server)
    tokens = await public_tokens(server, setup)
    form = {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]}
    for secret in ("", "anything", "lba_cs_guess"):
        assert_invalid_client(await token(server, setup, **form, client_secret=secret))
    for secret in ("", "anything"):
        r = await server.client.post("/oauth/token", form=form, headers=basic(setup.client_id, secret))
        assert_invalid_client(r)
    assert (await refreshed(server, setup, tokens["refresh_token"])).status == 200  # nothing was used up


async def test_a_confidential_app_presenting_no_secret_is_invalid_client(server):
    setup = await full_setup(server)
    code_r = await authorize(server, setup.token, setup.client_id, setup.redirect_uri)
    r = await token(server, setup, grant_type="authorization_code", code=code_r.data["code"],
                    redirect_uri=setup.redirect_uri)
    assert_invalid_client(r)
    r = await exchange(server, code_r.data["code"], setup.redirect_uri, setup.client_id, setup.client_secret)
    assert r.status == 200, r.text  # the code was not used up by the refused request
    assert_invalid_client(await refreshed(server, setup, r.data["refreshToken"]))
    assert_invalid_client(await server.client.post("/oauth/revoke", form={
        "client_id": setup.client_id, "token": r.data["refreshToken"]}))
    assert (await refresh(server, r.data["refreshToken"], setup.client_id, setup.client_secret)).status == 200


async def test_an_unknown_client_id_without_a_secret_is_invalid_client(server):
    r = await server.client.post("/oauth/token", form={"client_id": "cid_nobody", "grant_type": "refresh_token",
                                                       "refresh_token": "lba_rt_nothing"})
    assert_invalid_client(r)


async def test_the_envelope_token_endpoints_refuse_a_public_app(server):
    """Spec 4.3 and 4.4 stay for confidential apps: 401 whatever client_secret is sent; without the
    field, 400 as for any app."""
    setup = await public_setup(server)
    verifier, challenge = pkce_pair()
    code = (await authorize(server, setup.token, setup.client_id, setup.redirect_uri, codeChallenge=challenge,
                            codeChallengeMethod="S256")).data["code"]
    for secret in ("anything", "lba_cs_" + "a" * 43):
        r = await exchange(server, code, setup.redirect_uri, setup.client_id, secret, code_verifier=verifier)
        r.assert_error(401, "oauth2.client.secret_mismatch")
    r = await exchange(server, code, setup.redirect_uri, setup.client_id, None, code_verifier=verifier)
    r.assert_error(400, "request.validation_failed")
    r = await token(server, setup, grant_type="authorization_code", code=code, redirect_uri=setup.redirect_uri,
                    code_verifier=verifier)
    assert r.status == 200, r.text  # the refused requests used nothing up
    refresh_token = r.json["refresh_token"]
    r = await refresh(server, refresh_token, setup.client_id, "anything")
    r.assert_error(401, "oauth2.client.secret_mismatch")
    r = await refresh(server, refresh_token, setup.client_id, None)
    r.assert_error(400, "request.validation_failed")
    assert (await refreshed(server, setup, refresh_token)).status == 200


async def test_introspection_needs_a_confidential_client(server):
    setup = await public_setup(server)
    tokens = await public_tokens(server, setup)
    for value in (tokens["refresh_token"], tokens["access_token"]):
        r = await server.client.post("/oauth/introspect", form={"client_id": setup.client_id, "token": value})
        assert_invalid_client(r)
        assert "active" not in r.json


async def test_a_public_client_revokes_only_its_own_tokens(server):
    setup = await public_setup(server)
    other = await full_setup(server)
    code = (await authorize(server, other.token, other.client_id, other.redirect_uri)).data["code"]
    others = (await exchange(server, code, other.redirect_uri, other.client_id, other.client_secret)).data
    r = await server.client.post("/oauth/revoke", form={"client_id": setup.client_id,
                                                        "token": others["refreshToken"]})
    assert_revoke_ok(r)  # RFC 7009 2.2: 200, and nothing happened
    assert (await refresh(server, others["refreshToken"], other.client_id, other.client_secret)).status == 200

    tokens = await public_tokens(server, setup)
    r = await server.client.post("/oauth/revoke", form={"client_id": setup.client_id,
                                                        "token": tokens["access_token"]})
    assert_revoke_ok(r)
    await assert_revoked_at_me(server, tokens["access_token"])


# ---- PKCE required at the authorization endpoint ------------------------------------------------------------

async def test_a_public_client_without_pkce_gets_an_invalid_request_redirect(server):
    setup = await public_setup(server)
    for params in (front_params(setup.client_id, REGISTERED_URI, state="no-pkce"),
                   front_params(setup.client_id, REGISTERED_URI, state="no-pkce", code_challenge_method="S256")):
        page = await PageSession(server).get(oauth_url(params))
        assert page.status in (302, 303), (page.status, page.text[:300])
        query = redirect_query(page.location, REGISTERED_URI)
        assert query["error"] == ["invalid_request"] and query["state"] == ["no-pkce"], query
        assert query["iss"] == [server.settings.issuer] and "code" not in query
    # The same request with PKCE reaches the sign-in page, and a confidential app's without PKCE too.
    _, challenge = pkce_pair()
    page = await PageSession(server).get(oauth_url(front_params(
        setup.client_id, REGISTERED_URI, code_challenge=challenge, code_challenge_method="S256")))
    assert page.status == 200 and page.login_form() is not None
    confidential = await full_setup(server)
    page = await PageSession(server).get(oauth_url(front_params(confidential.client_id, REGISTERED_URI)))
    assert page.status == 200 and page.login_form() is not None


async def test_a_public_client_with_plain_pkce_is_refused(server):
    setup = await public_setup(server)
    verifier, _ = pkce_pair()
    page = await PageSession(server).get(oauth_url(front_params(
        setup.client_id, REGISTERED_URI, state="plain", code_challenge=verifier, code_challenge_method="plain")))
    query = redirect_query(page.location, REGISTERED_URI)
    assert query["error"] == ["invalid_request"] and query["state"] == ["plain"], query
    r = await authorize(server, setup.token, setup.client_id, setup.redirect_uri, codeChallenge=verifier,
                        codeChallengeMethod="plain")
    r.assert_error(400, "request.validation_failed")


async def test_a_public_client_without_pkce_is_refused_by_the_api_request_path(server):
    setup = await public_setup(server)
    r = await authorize(server, setup.token, setup.client_id, setup.redirect_uri)
    r.assert_error(400, "request.validation_failed")
    assert "PKCE" in r.json["message"]


# ---- rotation and reuse detection (RFC 9700 4.14.2) -----------------------------------------------------------

async def test_a_retired_token_within_ten_seconds_is_refused_and_revokes_nothing(server):
    setup = await public_setup(server)
    first = await public_tokens(server, setup)
    r = await refreshed(server, setup, first["refresh_token"])
    assert r.status == 200, r.text
    second = r.json
    server.clock.advance(GRACE)  # exactly 10 s later: still "two refreshes racing"
    assert_invalid_grant(await refreshed(server, setup, first["refresh_token"]))
    await assert_works_at_me(server, second["access_token"])
    await assert_works_at_me(server, first["access_token"])
    r = await refreshed(server, setup, second["refresh_token"])
    assert r.status == 200, r.text
    assert [a["clientId"] for a in await authorizations(server, setup.token)] == [setup.client_id]


async def test_a_retired_token_after_ten_seconds_revokes_the_grant(server, database_url):
    setup = await public_setup(server, webhook_url="https://app.example/hook")
    first = await public_tokens(server, setup)
    second = (await refreshed(server, setup, first["refresh_token"])).json
    third = (await refreshed(server, setup, second["refresh_token"])).json
    await assert_works_at_me(server, third["access_token"])
    server.clock.advance(GRACE + 1)
    r = await refreshed(server, setup, first["refresh_token"])  # replayed by whoever copied it
    assert_invalid_grant(r)
    assert "revoked" in r.json["error_description"]

    # The whole grant: the live refresh token, every access token, the user's authorization.
    assert_invalid_grant(await refreshed(server, setup, third["refresh_token"]))
    for access_token in (first["access_token"], second["access_token"], third["access_token"]):
        await assert_revoked_at_me(server, access_token)
    r = await server.client.get("/oauth/userinfo", bearer=third["access_token"])
    assert r.status == 401 and r.json["error"] == "invalid_token", r.text  # RFC 6750 3.1
    assert 'error="invalid_token"' in r.headers["WWW-Authenticate"]
    assert await authorizations(server, setup.token) == []
    # Presented again, it revokes nothing more: one event, as when the user revokes the app.
    assert_invalid_grant(await refreshed(server, setup, first["refresh_token"]))
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
    result = await asyncio.to_thread(run_cli, "webhooks", "list", "--app", setup.client_id, "--json", env=env)
    assert result.returncode == 0, result.stderr
    (event,) = json.loads(result.stdout)
    assert event["eventType"] == "authorization.revoked" and event["reason"] == "user_revoked"

    # A new authorization starts a new grant that works.
    fresh = await public_tokens(server, setup)
    assert (await refreshed(server, setup, fresh["refresh_token"])).status == 200


async def test_a_confidential_apps_refresh_token_does_not_rotate(server):
    setup = await full_setup(server)
    code = (await authorize(server, setup.token, setup.client_id, setup.redirect_uri)).data["code"]
    tokens = (await exchange(server, code, setup.redirect_uri, setup.client_id, setup.client_secret)).data
    for _ in range(2):
        server.clock.advance(GRACE + 1)
        r = await server.client.post("/oauth/token", form={
            "grant_type": "refresh_token", "refresh_token": tokens["refreshToken"]},
            headers=basic(setup.client_id, setup.client_secret))
        assert r.status == 200 and r.json["refresh_token"] == tokens["refreshToken"], r.text


async def test_concurrent_refreshes_of_one_token_exactly_one_succeeds(server):
    setup = await public_setup(server)
    first = await public_tokens(server, setup)
    answers = await asyncio.gather(*(refreshed(server, setup, first["refresh_token"]) for _ in range(8)))
    statuses = sorted(r.status for r in answers)
    assert statuses == [200] + [400] * 7, [r.text for r in answers]
    for r in answers:
        if r.status == 400:
            assert_invalid_grant(r)
    (winner,) = [r.json for r in answers if r.status == 200]
    r = await refreshed(server, setup, winner["refresh_token"])  # the grant was not revoked by the race
    assert r.status == 200, r.text


# ---- the command line -------------------------------------------------------------------------------------------

async def test_cli_creates_and_shows_a_public_app_and_refuses_to_rotate_its_secret(server, database_url):
    owner = await server.create_user()
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}

    async def cli(*args: str):
        return await asyncio.to_thread(run_cli, *args, env=env)
    result = await cli("apps", "create", "--name", "Desktop Agent", "--owner", owner["email"], "--redirect-uri",
                       "http://127.0.0.1/callback", "--public", "--json")
    assert result.returncode == 0, result.stderr
    created = json.loads(result.stdout)
    assert set(created) == {"appId", "clientId", "clientSecret", "webhookSecret", "redirectUris", "scopes",
                            "webhookUrl"}
    assert created["clientSecret"] is None and created["webhookSecret"].startswith("lba_whs_")
    result = await cli("apps", "show", created["clientId"], "--json")
    assert json.loads(result.stdout)["tokenEndpointAuthMethod"] == "none"
    result = await cli("apps", "rotate-secret", created["clientId"])
    assert result.returncode == 1 and "public client" in result.stderr, (result.returncode, result.stderr)

    confidential = await server.create_app(owner["email"])
    result = await cli("apps", "show", confidential["clientId"], "--json")
    assert json.loads(result.stdout)["tokenEndpointAuthMethod"] == "client_secret_basic"


# ---- the console ----------------------------------------------------------------------------------------------

async def test_the_console_creates_a_public_client_with_no_secret(server):
    owner = await server.create_user()
    session = PageSession(server)
    await session.open_logged_in("/console/", owner["email"], owner["password"])
    page = await session.get("/console/apps/new")
    form = next(f for f in page.forms if f.action == "/console/apps/new")
    assert "public client (no secret)" in page.text.lower()
    page = await session.submit(page, form, {"name": "Desktop Agent", "redirect_uris": REGISTERED_URI,
                                             "scopes": "userinfo", "webhook_url": "", "client_type": "public"})
    assert page.status == 200, page.text[:500]
    text = page.response.text
    client_id = text.split('<code id="client-id">', 1)[1].split("</code>", 1)[0]
    assert 'id="client-secret"' not in text and 'id="webhook-secret"' in text
    assert "this secret" in text  # one secret shown, the webhook's
    assert not any(f.hidden().get("action") == "rotate-secret" for f in page.forms)
    rotate = next(f for f in page.forms if f.hidden().get("action") == "rotate-webhook-secret")
    page = await session.submit(page, rotate, {"action": "rotate-secret"})  # a hand-made request
    assert page.status == 400 and "public client" in page.text, (page.status, page.text[:300])

    setup = Setup(user=owner, token=await server.login(owner["email"], owner["password"]),
                  app={"clientId": client_id, "clientSecret": None, "redirectUris": [REGISTERED_URI]})
    tokens = await public_tokens(server, setup, "userinfo")
    assert (await refreshed(server, setup, tokens["refresh_token"])).status == 200

"""DPoP at lbauth (RFC 9449): proofs at /oauth/token bind the access token (`token_type` DPoP,
`cnf.jkt`) and a public client's refresh token to the client's key; `dpop_jkt` binds a code; a
bound token opens /api/auth/me and UserInfo only with `Authorization: DPoP` and a fresh proof;
every proof works once, across processes."""

from __future__ import annotations

import pytest

from tests.conftest import arun_cli, start_server
from tests.dpop_keys import DPoPKey
from tests.flow_helpers import PageSession, Setup, full_setup, oauth_url, pkce_pair, redirect_query
from tests.support import basic_auth, unverified_claims


@pytest.fixture
def srv(server):
    """lbauth on a loopback port (tests/conftest.py's `server`)."""
    return server


async def browser_code(server, setup: Setup, **params) -> str:
    """A code through /oauth/ in a browser-like session: sign in, approve."""
    browser = PageSession(server)
    query = {"client_id": setup.client_id, "redirect_uri": setup.redirect_uri, "response_type": "code",
             "state": "st", "scope": "openid userinfo", **params}
    page = await browser.open_logged_in(oauth_url(query), setup.user["email"], setup.user["password"])
    if page.consent_form() is not None:
        page = await browser.decide(page, "approve")
    return redirect_query(page.location, setup.redirect_uri)["code"][0]


async def token_request(server, form: dict, *, client: tuple[str, str] | None = None, proofs: list[str] = ()):
    headers = {"Authorization": basic_auth(*client)} if client else {}
    if proofs:
        headers["DPoP"] = ", ".join(proofs) if len(proofs) > 1 else proofs[0]
    return await server.client.post("/oauth/token", form=form, headers=headers)


def token_url(server) -> str:
    return server.url + "/oauth/token"


async def exchange(server, setup: Setup, code: str, key: DPoPKey | None, **extra):
    proofs = [key.proof("POST", token_url(server), server.clock.now())] if key else []
    return await token_request(server, {"grant_type": "authorization_code", "code": code,
                                        "redirect_uri": setup.redirect_uri, **extra},
                               client=(setup.client_id, setup.client_secret), proofs=proofs)


def assert_proof_refused(response, status: int = 400) -> None:
    assert response.status == status, response.text
    assert response.json["error"] == "invalid_dpop_proof", response.text


@pytest.mark.parametrize("alg", ["ES256", "EdDSA", "RS256"])
async def test_a_proof_binds_the_access_token_which_then_needs_a_proof_of_that_key(srv, alg):
    setup = await full_setup(srv)
    key = DPoPKey(alg)
    r = await exchange(srv, setup, await browser_code(srv, setup), key)
    assert r.status == 200, r.text
    assert r.json["token_type"] == "DPoP"
    access_token = r.json["access_token"]
    assert unverified_claims(access_token.removeprefix("lba_at_"))["cnf"] == {"jkt": key.jkt}

    me = srv.url + "/api/auth/me"
    proof = key.proof("GET", me, srv.clock.now(), access_token=access_token)
    ok = await srv.client.get("/api/auth/me", headers={"Authorization": f"DPoP {access_token}", "DPoP": proof})
    assert ok.status == 200, ok.text
    replayed = await srv.client.get("/api/auth/me", headers={"Authorization": f"DPoP {access_token}", "DPoP": proof})
    assert replayed.status == 401 and replayed.json["subCode"] == "oauth2.dpop.invalid_proof"
    assert replayed.headers["WWW-Authenticate"].startswith('DPoP error="invalid_dpop_proof"')
    as_bearer = await srv.client.get("/api/auth/me", bearer=access_token)
    assert as_bearer.status == 401 and as_bearer.headers["WWW-Authenticate"].startswith("DPoP ")
    other = DPoPKey()
    stolen = await srv.client.get("/api/auth/me", headers={
        "Authorization": f"DPoP {access_token}",
        "DPoP": other.proof("GET", me, srv.clock.now(), access_token=access_token)})
    assert stolen.status == 401 and stolen.json["subCode"] == "oauth2.dpop.invalid_proof"
    no_ath = await srv.client.get("/api/auth/me", headers={"Authorization": f"DPoP {access_token}",
                                                           "DPoP": key.proof("GET", me, srv.clock.now())})
    assert no_ath.status == 401

    userinfo = srv.url + "/oauth/userinfo"
    info = await srv.client.get("/oauth/userinfo", headers={
        "Authorization": f"DPoP {access_token}",
        "DPoP": key.proof("GET", userinfo, srv.clock.now(), access_token=access_token)})
    assert info.status == 200 and info.json["sub"], info.text
    info_as_bearer = await srv.client.get("/oauth/userinfo", bearer=access_token)
    assert info_as_bearer.status == 401 and info_as_bearer.headers["WWW-Authenticate"].startswith("DPoP ")


async def test_without_a_proof_tokens_stay_bearer_and_a_bearer_token_is_refused_as_dpop(srv):
    setup = await full_setup(srv)
    r = await exchange(srv, setup, await browser_code(srv, setup), None)
    assert r.status == 200 and r.json["token_type"] == "Bearer", r.text
    access_token = r.json["access_token"]
    assert "cnf" not in unverified_claims(access_token.removeprefix("lba_at_"))
    assert (await srv.client.get("/api/auth/me", bearer=access_token)).status == 200
    key = DPoPKey()
    as_dpop = await srv.client.get("/api/auth/me", headers={
        "Authorization": f"DPoP {access_token}",
        "DPoP": key.proof("GET", srv.url + "/api/auth/me", srv.clock.now(), access_token=access_token)})
    assert as_dpop.status == 401


async def test_the_token_endpoint_refuses_bad_proofs(srv):
    setup = await full_setup(srv)
    key, url, now = DPoPKey(), token_url(srv), srv.clock.now()
    for proofs in ([key.proof("GET", url, now)], [key.proof("POST", srv.url + "/oauth/par", now)],
                   [key.proof("POST", url, now - 61)], [key.proof("POST", url, now + 61)],
                   [key.proof("POST", url, now), key.proof("POST", url, now)], ["not.a.proof"]):
        code = await browser_code(srv, setup)
        r = await token_request(srv, {"grant_type": "authorization_code", "code": code,
                                      "redirect_uri": setup.redirect_uri},
                                client=(setup.client_id, setup.client_secret), proofs=proofs)
        assert r.status == 400 and r.json["error"] == "invalid_dpop_proof", (proofs, r.text[:80])
    accepted = key.proof("POST", url, now - 59)
    first = await token_request(srv, {"grant_type": "authorization_code", "code": await browser_code(srv, setup),
                                      "redirect_uri": setup.redirect_uri},
                                client=(setup.client_id, setup.client_secret), proofs=[accepted])
    assert first.status == 200, first.text
    again = await token_request(srv, {"grant_type": "refresh_token", "refresh_token": first.json["refresh_token"]},
                                client=(setup.client_id, setup.client_secret), proofs=[accepted])
    assert_proof_refused(again)


async def test_a_proof_is_used_once_across_processes(srv, tmp_path, database_url):
    setup = await full_setup(srv)
    other = await start_server(tmp_path / "b", database_url, master_key=None,
                               data_dir=str(srv.settings.data_dir), base_url=srv.settings.base_url)
    try:
        key = DPoPKey()
        proof = key.proof("POST", token_url(srv), srv.clock.now())
        form = {"grant_type": "authorization_code", "redirect_uri": setup.redirect_uri}
        r = await token_request(srv, {**form, "code": await browser_code(srv, setup)},
                                client=(setup.client_id, setup.client_secret), proofs=[proof])
        assert r.status == 200, r.text
        code = await browser_code(srv, setup)
        replayed = await token_request(other, {**form, "code": code},
                                       client=(setup.client_id, setup.client_secret), proofs=[proof])
        assert_proof_refused(replayed)
        # The refused request used up nothing: the code is good with a proof of its own.
        fresh = await token_request(other, {**form, "code": code}, client=(setup.client_id, setup.client_secret),
                                    proofs=[key.proof("POST", token_url(srv), srv.clock.now())])
        assert fresh.status == 200 and fresh.json["token_type"] == "DPoP", fresh.text
    finally:
        other.client.close()
        await other.running.stop()


async def test_a_public_clients_refresh_token_is_bound_to_its_key(srv):
    user = await srv.create_user()
    app = await srv.create_app(user["email"], public=True)
    setup = Setup(user=user, token="", app={**app, "clientSecret": None})
    verifier, challenge = pkce_pair()
    code = await browser_code(srv, setup, code_challenge=challenge, code_challenge_method="S256")
    key = DPoPKey("EdDSA")
    r = await token_request(srv, {"grant_type": "authorization_code", "code": code, "client_id": setup.client_id,
                                  "redirect_uri": setup.redirect_uri, "code_verifier": verifier},
                            proofs=[key.proof("POST", token_url(srv), srv.clock.now())])
    assert r.status == 200 and r.json["token_type"] == "DPoP", r.text
    refresh = {"grant_type": "refresh_token", "client_id": setup.client_id, "refresh_token": r.json["refresh_token"]}
    assert_proof_refused(await token_request(srv, refresh))
    assert_proof_refused(await token_request(srv, refresh, proofs=[
        DPoPKey().proof("POST", token_url(srv), srv.clock.now())]))
    refreshed = await token_request(srv, refresh, proofs=[key.proof("POST", token_url(srv), srv.clock.now())])
    assert refreshed.status == 200 and refreshed.json["token_type"] == "DPoP", refreshed.text
    successor = {**refresh, "refresh_token": refreshed.json["refresh_token"]}
    assert_proof_refused(await token_request(srv, successor))  # the rotated token keeps the binding


async def test_dpop_jkt_binds_the_code_to_a_key_at_the_front_channel_and_in_a_pushed_request(srv):
    setup = await full_setup(srv)
    key = DPoPKey()
    code = await browser_code(srv, setup, dpop_jkt=key.jkt)
    assert_proof_refused(await exchange(srv, setup, code, DPoPKey()))
    assert_proof_refused(await exchange(srv, setup, code, None))
    bound = await exchange(srv, setup, code, key)  # the refusals above did not use the code up
    assert bound.status == 200 and bound.json["token_type"] == "DPoP", bound.text

    pushed = await srv.client.post("/oauth/par", form={
        "response_type": "code", "redirect_uri": setup.redirect_uri, "scope": "userinfo", "state": "p",
        "dpop_jkt": key.jkt}, headers={"Authorization": basic_auth(setup.client_id, setup.client_secret)})
    assert pushed.status == 201, pushed.text
    browser = PageSession(srv)
    page = await browser.open_logged_in(oauth_url({"client_id": setup.client_id,
                                                   "request_uri": pushed.json["request_uri"]}),
                                        setup.user["email"], setup.user["password"])
    if page.consent_form() is not None:
        page = await browser.decide(page, "approve")
    code = redirect_query(page.location, setup.redirect_uri)["code"][0]
    assert_proof_refused(await exchange(srv, setup, code, DPoPKey()))
    assert (await exchange(srv, setup, code, key)).status == 200

    bad = await browser.get(oauth_url({"client_id": setup.client_id, "redirect_uri": setup.redirect_uri,
                                       "response_type": "code", "state": "s", "dpop_jkt": "short"}))
    assert redirect_query(bad.location, setup.redirect_uri)["error"] == ["invalid_request"]


async def test_an_app_that_requires_dpop_gets_no_bearer_token(srv, database_url):
    setup = await full_setup(srv)
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(srv.settings.data_dir)}
    updated = await arun_cli("apps", "update", setup.client_id, "--require-dpop", "--json", env=env)
    assert updated.returncode == 0 and '"dpopBoundAccessTokens": true' in updated.stdout, updated.stderr
    assert_proof_refused(await exchange(srv, setup, await browser_code(srv, setup), None))
    key = DPoPKey()
    r = await exchange(srv, setup, await browser_code(srv, setup), key)
    assert r.status == 200 and r.json["token_type"] == "DPoP", r.text
    refresh = {"grant_type": "refresh_token", "refresh_token": r.json["refresh_token"]}
    client = (setup.client_id, setup.client_secret)
    assert_proof_refused(await token_request(srv, refresh, client=client))  # a confidential client's: any key
    later = await token_request(srv, refresh, client=client,
                                proofs=[DPoPKey().proof("POST", token_url(srv), srv.clock.now())])
    assert later.status == 200 and later.json["token_type"] == "DPoP", later.text


async def test_discovery_names_the_proof_algorithms(srv):
    meta = (await srv.client.get("/.well-known/oauth-authorization-server")).json
    assert meta["dpop_signing_alg_values_supported"] == ["ES256", "EdDSA", "RS256"]


async def test_a_resource_service_checks_the_servers_dpop_tokens_offline(srv):
    """lbauth's token, bound at /oauth/token, at a Tornado service protected by `lbauth.verify`'s
    `requires_token`: with a proof by its key it passes (once per proof); as Bearer it is refused."""
    import tornado.web

    from lbauth.verify import Verifier, requires_token
    from tests.test_verify import resource_service

    verifier = Verifier(srv.url, srv.settings.audience, clock=srv.clock.now, poll_seconds=0.2)
    await verifier.arefresh()

    class Notes(tornado.web.RequestHandler):
        @requires_token(verifier, "userinfo")
        def get(self) -> None:
            self.finish({"sub": self.token_claims.subject})

    setup = await full_setup(srv)
    key = DPoPKey()
    r = await exchange(srv, setup, await browser_code(srv, setup), key)
    access_token = r.json["access_token"]
    try:
        async with resource_service(("/notes", Notes)) as client:
            url = client.base_url + "/notes"
            proof = key.proof("GET", url, srv.clock.now(), access_token=access_token)
            ok = await client.get("/notes", headers={"Authorization": f"DPoP {access_token}", "DPoP": proof})
            assert ok.status == 200, ok.text
            again = await client.get("/notes", headers={"Authorization": f"DPoP {access_token}", "DPoP": proof})
            assert again.status == 401 and again.headers["WWW-Authenticate"].startswith(
                'DPoP error="invalid_dpop_proof"')
            as_bearer = await client.get("/notes", bearer=access_token)
            assert as_bearer.status == 401 and as_bearer.headers["WWW-Authenticate"].startswith("DPoP ")
    finally:
        verifier.close()


async def test_a_proof_at_the_pushed_request_endpoint_binds_the_code(srv):
    """RFC 9449 10.1: the proof's key becomes the request's dpop_jkt; another dpop_jkt is refused."""
    setup = await full_setup(srv)
    key = DPoPKey()
    form = {"response_type": "code", "redirect_uri": setup.redirect_uri, "scope": "userinfo", "state": "p"}
    auth = {"Authorization": basic_auth(setup.client_id, setup.client_secret)}
    par = srv.url + "/oauth/par"
    mismatch = await srv.client.post("/oauth/par", form={**form, "dpop_jkt": DPoPKey().jkt},
                                     headers={**auth, "DPoP": key.proof("POST", par, srv.clock.now())})
    assert_proof_refused(mismatch)
    pushed = await srv.client.post("/oauth/par", form=form,
                                   headers={**auth, "DPoP": key.proof("POST", par, srv.clock.now())})
    assert pushed.status == 201, pushed.text
    browser = PageSession(srv)
    page = await browser.open_logged_in(oauth_url({"client_id": setup.client_id,
                                                   "request_uri": pushed.json["request_uri"]}),
                                        setup.user["email"], setup.user["password"])
    page = await browser.decide(page, "approve")
    code = redirect_query(page.location, setup.redirect_uri)["code"][0]
    assert_proof_refused(await exchange(srv, setup, code, None))
    assert (await exchange(srv, setup, code, key)).json["token_type"] == "DPoP"

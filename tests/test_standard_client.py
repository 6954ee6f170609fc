"""An off-the-shelf OAuth client (authlib's OAuth2Session over requests) completes the
authorization code flow with PKCE and a refresh against /oauth/token, unchanged (contract 11)."""

from __future__ import annotations

import asyncio

import pytest
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session

from tests.flow_helpers import PageSession, full_setup


@pytest.mark.parametrize("auth_method", ["client_secret_basic", "client_secret_post"])
async def test_authlib_client_completes_code_pkce_and_refresh(server, auth_method):
    setup = await full_setup(server)
    meta = (await server.client.get("/.well-known/oauth-authorization-server")).json
    assert auth_method in meta["token_endpoint_auth_methods_supported"]
    session = OAuth2Session(setup.client_id, setup.client_secret, scope="userinfo chat.read",
                            redirect_uri=setup.redirect_uri, code_challenge_method="S256",
                            token_endpoint_auth_method=auth_method)
    verifier = generate_token(48)
    url, state = session.create_authorization_url(meta["authorization_endpoint"], code_verifier=verifier)

    # The user's browser: sign in, approve, land on the redirect URI with the code.
    browser = PageSession(server)
    consent = await browser.open_logged_in(url, setup.user["email"], setup.user["password"])
    landing = await browser.decide(consent, "approve")
    assert landing.status in (302, 303)

    # The client's server: authlib does the rest, blocking, in a thread (the server keeps serving).
    token = await asyncio.to_thread(session.fetch_token, meta["token_endpoint"],
                                    authorization_response=landing.location, code_verifier=verifier)
    assert token["token_type"] == "Bearer" and token["expires_in"] == 7200
    assert token["access_token"].startswith("lba_at_") and token["refresh_token"].startswith("lba_rt_")
    assert token["scope"] == "userinfo chat.read"
    me = await server.client.get("/api/auth/me", bearer=token["access_token"])
    assert me.data["userId"] == setup.user["userId"]

    renewed = await asyncio.to_thread(session.refresh_token, meta["token_endpoint"],
                                      refresh_token=token["refresh_token"])
    assert renewed["access_token"] != token["access_token"]
    assert renewed["refresh_token"] == token["refresh_token"]  # no rotation (spec section 3)
    assert (await server.client.get("/api/auth/me", bearer=renewed["access_token"])).status == 200


async def test_rfc_errors_have_the_rfc_shape(server):
    setup = await full_setup(server)
    form = {"grant_type": "authorization_code", "code": "lba_ac_nope", "redirect_uri": setup.redirect_uri,
            "client_id": setup.client_id, "client_secret": setup.client_secret}
    r = await server.client.post("/oauth/token", form=form)
    assert r.status == 400 and r.json["error"] == "invalid_grant" and r.json["error_description"]
    assert r.headers["Cache-Control"] == "no-store" and r.headers["Pragma"] == "no-cache"
    r = await server.client.post("/oauth/token", form={**form, "client_secret": "wrong"})
    assert r.status == 401 and r.json["error"] == "invalid_client"
    r = await server.client.post("/oauth/token", form={**form, "grant_type": "password"})
    assert r.status == 400 and r.json["error"] == "unsupported_grant_type"
    r = await server.client.post("/oauth/token", form={"grant_type": "authorization_code"})
    assert r.status == 401 and r.json["error"] == "invalid_client"
    without_credentials = {k: v for k, v in form.items() if k not in ("client_id", "client_secret")}
    r = await server.client.post("/oauth/token", form=without_credentials,
                                 headers={"Authorization": "Basic !!notbase64"})
    assert r.status == 401 and r.json["error"] == "invalid_client"
    assert r.headers["WWW-Authenticate"] == 'Basic realm="lbauth"'
    r = await server.client.post("/oauth/token", json={"grant_type": "authorization_code"})
    assert r.status == 400 and r.json["error"] == "invalid_request"

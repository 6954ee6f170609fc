"""An off-the-shelf OAuth client (authlib's OAuth2Session over requests) completes the
authorization code flow with PKCE and a refresh against /oauth/token, unchanged (contract 11)."""

from __future__ import annotations

import asyncio
import base64
from urllib.parse import quote

import pytest
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session

from tests.flow_helpers import PageSession, code_for, full_setup


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


def _basic(client_id: str, client_secret: str, encode=lambda text: quote(text, safe="")) -> dict[str, str]:
    """client_secret_basic: each half application/x-www-form-urlencoded, then base64 (RFC 6749 2.3.1)."""
    pair = f"{encode(client_id)}:{encode(client_secret)}"
    return {"Authorization": "Basic " + base64.b64encode(pair.encode()).decode()}


async def test_a_client_id_beside_basic_must_name_the_same_client(server):
    """The MCP Python SDK sends client_id in the body beside HTTP Basic (contract 11)."""
    setup = await full_setup(server)
    other = await server.create_app(setup.user["email"], name="Other App")
    headers = _basic(setup.client_id, setup.client_secret)
    code = await code_for(server, setup)
    r = await server.client.post("/oauth/token", headers=headers, form={
        "grant_type": "authorization_code", "code": code, "redirect_uri": setup.redirect_uri,
        "client_id": setup.client_id})
    assert r.status == 200, r.text
    refresh_token = r.json["refresh_token"]
    for path, form in (("/oauth/token", {"grant_type": "refresh_token", "refresh_token": refresh_token}),
                       ("/oauth/introspect", {"token": refresh_token}), ("/oauth/revoke", {"token": refresh_token})):
        wrong = await server.client.post(path, headers=headers, form={**form, "client_id": other["clientId"]})
        assert wrong.status == 401 and wrong.json["error"] == "invalid_client", (path, wrong.text)
        assert wrong.headers["WWW-Authenticate"] == 'Basic realm="lbauth"'
    assert (await server.client.post("/oauth/introspect", headers=headers, form={
        "token": refresh_token, "client_id": setup.client_id})).json["active"] is True  # nothing was revoked
    same = await server.client.post("/oauth/revoke", headers=headers, form={
        "token": refresh_token, "client_id": setup.client_id})
    assert same.status == 200 and same.json == {}
    assert same.headers["Content-Type"].split(";")[0] == "application/json"  # RFC 7009 for clients that parse it


async def test_basic_credentials_are_form_urldecoded(server):
    """RFC 6749 2.3.1: a client may percent-encode any character of its id and secret."""
    setup = await full_setup(server)

    def every_byte(text: str) -> str:
        return "".join(f"%{b:02X}" for b in text.encode())
    form = {"grant_type": "authorization_code", "redirect_uri": setup.redirect_uri}
    r = await server.client.post("/oauth/token", headers=_basic(setup.client_id, setup.client_secret, every_byte),
                                 form={**form, "code": await code_for(server, setup)})
    assert r.status == 200, r.text
    raw = _basic(setup.client_id, setup.client_secret.replace("_", "%5f"), lambda text: text)
    r = await server.client.post("/oauth/token", headers=raw, form={**form, "code": await code_for(server, setup)})
    assert r.status == 200, r.text

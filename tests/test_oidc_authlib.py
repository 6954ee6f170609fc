"""Authlib's OpenID Connect client signs a user in against lbauth, unchanged (contract 15, issue 22):
`openid profile email` with a nonce and PKCE, the ID token validated by `authlib.oidc.core.CodeIDToken`
against the JWKS, UserInfo, and a refresh that brings a new ID token with the same `sub` and `auth_time`.
Apps that chose ES256 or EdDSA for their ID tokens get tokens Authlib validates too (`at_hash` with
SHA-256, and SHA-512 for EdDSA).

Only the browser step (sign in, approve) is ours: `PageSession` plays the user's browser."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import warnings

import pytest
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session
from authlib.oidc.core import CodeIDToken
from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import KeySet

from lbauth.core.crypto import keys
from tests.flow_helpers import PageSession, Setup, full_setup

SCOPE = "openid profile email"


def validated(server, id_token: str, jwks: dict, client_id: str, nonce: str, access_token: str) -> CodeIDToken:
    """The ID token as Authlib's relying party validates it (OpenID Connect Core 3.1.3.7)."""
    return code_id_token(server, id_token, jwks, client_id, access_token,
                         nonce_option={"nonce": {"essential": True, "value": nonce}}, nonce=nonce)


def code_id_token(server, id_token: str, jwks: dict, client_id: str, access_token: str, *,
                  nonce_option: dict | None = None, nonce: str | None = None) -> CodeIDToken:
    """The JWS signature checked against the JWKS (joserfc: Authlib's own JOSE layer, as authlib.jose
    is deprecated), then Authlib's CodeIDToken validates the claims: iss, aud, exp, iat, nonce,
    at_hash (by the header's alg)."""
    with warnings.catch_warnings():  # joserfc flags "EdDSA" as deprecated by RFC 9864 (now "Ed25519")
        warnings.simplefilter("ignore", SecurityWarning)
        token = jwt.decode(id_token, KeySet.import_key_set(jwks), algorithms=["RS256", "ES256", "EdDSA"])
    claims = CodeIDToken(token.claims, token.header,
                         options={"iss": {"essential": True, "value": server.settings.issuer},
                                  "aud": {"essential": True, "value": client_id}, **(nonce_option or {})},
                         params={"nonce": nonce, "client_id": client_id, "access_token": access_token})
    claims.validate(now=int(server.clock.now()))  # the server's clock is frozen in 2030
    return claims


async def sign_in_with_authlib(server, setup, meta: dict, *, auth_method: str = "client_secret_basic"):
    """The relying party's authorization URL, the user's browser, then Authlib's code exchange."""
    session = OAuth2Session(setup.client_id, setup.client_secret, scope=SCOPE, redirect_uri=setup.redirect_uri,
                            code_challenge_method="S256", token_endpoint_auth_method=auth_method)
    verifier, nonce = generate_token(48), generate_token(20)
    url, state = session.create_authorization_url(meta["authorization_endpoint"], code_verifier=verifier, nonce=nonce)
    browser = PageSession(server)
    consent = await browser.open_logged_in(url, setup.user["email"], setup.user["password"])
    assert consent.consent_form() is not None, consent.text[:300]
    landing = await browser.decide(consent, "approve")
    assert landing.status in (302, 303), landing.text[:300]
    token = await asyncio.to_thread(session.fetch_token, meta["token_endpoint"],
                                    authorization_response=landing.location, code_verifier=verifier)
    return session, token, nonce


async def discovery(server) -> tuple[dict, dict]:
    meta = (await server.client.get("/.well-known/openid-configuration")).json
    assert meta["issuer"] == server.settings.issuer
    jwks = (await server.client.get(meta["jwks_uri"].removeprefix(server.url))).json
    return meta, jwks


async def test_authlib_openid_client_signs_in_reads_userinfo_and_refreshes(server):
    setup = await full_setup(server)
    meta, jwks = await discovery(server)
    assert {"openid", "profile", "email"} <= set(meta["scopes_supported"])
    assert "S256" in meta["code_challenge_methods_supported"]
    session, token, nonce = await sign_in_with_authlib(server, setup, meta)
    assert token["scope"] == SCOPE and token["token_type"] == "Bearer"
    claims = validated(server, token["id_token"], jwks, setup.client_id, nonce, token["access_token"])
    assert claims["amr"] == ["pwd"] and claims["sid"].startswith("ses_")

    # UserInfo: GET with the header (Authlib's session adds it), sub = the ID token's sub.
    response = await asyncio.to_thread(session.get, meta["userinfo_endpoint"])
    assert response.status_code == 200, response.text
    info = response.json()
    assert info["sub"] == claims["sub"] != setup.user["userId"]
    assert info["name"] == setup.user["name"] and info["email"] == setup.user["email"]
    assert info["email_verified"] is False

    # The refresh: a new ID token, same sub and auth_time (OpenID Connect Core 12.2).
    server.clock.advance(60)
    renewed = await asyncio.to_thread(session.refresh_token, meta["token_endpoint"],
                                      refresh_token=token["refresh_token"])
    assert renewed["id_token"] != token["id_token"]
    again = code_id_token(server, renewed["id_token"], jwks, setup.client_id, renewed["access_token"])
    assert again["sub"] == claims["sub"] and again["auth_time"] == claims["auth_time"]
    assert "nonce" not in again  # Core 12.2: none in a refreshed ID token


async def test_authlib_userinfo_claims_follow_the_scope(server):
    user = await server.create_user(name="Ada Lovelace", email_verified=True)
    token = await server.login(user["email"], user["password"])
    app = await server.create_app(user["email"], redirect_uris=["https://app.example/callback"])
    meta, jwks = await discovery(server)
    setup = Setup(user=user, token=token, app=app)

    async def userinfo_for(scope: str) -> dict:
        session = OAuth2Session(app["clientId"], app["clientSecret"], scope=scope, redirect_uri=setup.redirect_uri,
                                code_challenge_method="S256")
        verifier = generate_token(48)
        url, _ = session.create_authorization_url(meta["authorization_endpoint"], code_verifier=verifier,
                                                  nonce=generate_token(12))
        browser = PageSession(server)
        page = await browser.open_logged_in(url, user["email"], user["password"])
        if page.consent_form() is not None:
            page = await browser.decide(page, "approve")
        await asyncio.to_thread(session.fetch_token, meta["token_endpoint"],
                                          authorization_response=page.location, code_verifier=verifier)
        return (await asyncio.to_thread(session.get, meta["userinfo_endpoint"])).json()

    only_openid = await userinfo_for("openid")
    assert set(only_openid) == {"sub"}
    profile = await userinfo_for("openid profile")
    assert set(profile) == {"sub", "name"} and profile["name"] == "Ada Lovelace"
    email = await userinfo_for("openid email")
    assert set(email) == {"sub", "email", "email_verified"} and email["email_verified"] is True
    assert only_openid["sub"] == profile["sub"] == email["sub"]


@pytest.mark.parametrize(("alg", "digest"), [("ES256", hashlib.sha256), ("EdDSA", hashlib.sha512)],
                         ids=["ES256", "EdDSA"])
async def test_authlib_validates_es256_and_eddsa_id_tokens(server, alg, digest):
    user = await server.create_user()
    app = await server.create_app(user["email"], id_token_alg=alg)
    # What `lbauth apps create --id-token-alg` does beside creating the app: the algorithm's key.
    await keys.ensure_active_key(server.db, server.clock, server.services.master_keys, alg)
    setup = Setup(user=user, token="", app=app)
    meta, _ = await discovery(server)
    assert alg in meta["id_token_signing_alg_values_supported"]
    _, token, nonce = await sign_in_with_authlib(server, setup, meta, auth_method="client_secret_post")
    _, jwks = await discovery(server)  # the app's key was made when it chose the algorithm
    claims = validated(server, token["id_token"], jwks, setup.client_id, nonce, token["access_token"])
    assert claims.header["alg"] == alg and claims.header["kid"]
    key = next(k for k in jwks["keys"] if k["kid"] == claims.header["kid"])
    assert key["kty"] == {"ES256": "EC", "EdDSA": "OKP"}[alg]
    half = digest(token["access_token"].encode("ascii")).digest()
    expected = base64.urlsafe_b64encode(half[: len(half) // 2]).rstrip(b"=").decode()
    assert claims["at_hash"] == expected

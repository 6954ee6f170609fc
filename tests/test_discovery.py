"""JWKS (RFC 7517) and authorization server metadata (RFC 8414, OpenID Connect Discovery 1.0), read
with an independent JOSE library (joserfc), for every supported signing algorithm. The JWKS holds the
access-token key and the RS256 ID-token key (contract 8, 15)."""

from __future__ import annotations

import warnings

import jwt as pyjwt
import pytest
from joserfc import jwt
from joserfc.errors import SecurityWarning
from joserfc.jwk import KeySet

from lbauth.core.crypto import opaque
from tests.conftest import start_server

RFC8414_REQUIRED = {"issuer", "response_types_supported"}


@pytest.mark.parametrize("alg", ["ES256", "RS256", "EdDSA"])
async def test_jwks_parses_and_verifies_what_the_key_signs(tmp_path, database_url, alg):
    srv = await start_server(tmp_path, database_url, signing_alg=alg)
    try:
        r = await srv.client.get("/.well-known/jwks.json")
        assert r.status == 200 and r.headers["Content-Type"].startswith("application/jwk-set+json")
        document = r.json
        keyset = KeySet.import_key_set(document)
        # The access-token key, and the RS256 key of ID tokens (one key when they are the same algorithm).
        assert sorted(k["alg"] for k in document["keys"]) == sorted({alg, "RS256"})
        assert len(keyset.keys) == len(document["keys"])
        for jwk, key in zip(document["keys"], keyset.keys, strict=True):
            assert jwk["use"] == "sig"
            assert jwk["kid"] == key.thumbprint()  # RFC 7638 thumbprint, computed independently
            assert not {"d", "p", "q", "dp", "dq", "qi"} & set(jwk)  # public members only

        # The published keys verify what the server's active keys sign.
        assert srv.services.keyring.signer.alg == alg
        assert set(srv.services.keyring.signers) == {alg, "RS256"}
        for signer in srv.services.keyring.signers.values():
            jwk = next(k for k in document["keys"] if k["kid"] == signer.kid)
            assert jwk["alg"] == signer.alg
            token = pyjwt.encode({"sub": "x"}, signer.private_key, algorithm=signer.alg,
                                 headers={"kid": signer.kid})
            with warnings.catch_warnings():
                # RFC 9864 deprecates the name "EdDSA" for "Ed25519"; the contract names EdDSA.
                warnings.simplefilter("ignore", SecurityWarning)
                decoded = jwt.decode(token, keyset, algorithms=[signer.alg])
            assert decoded.claims == {"sub": "x"} and decoded.header["kid"] == jwk["kid"]
    finally:
        srv.client.close()
        await srv.running.stop()


async def test_metadata_follows_rfc_8414(server):
    r = await server.client.get("/.well-known/oauth-authorization-server")
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
    meta = r.json
    assert RFC8414_REQUIRED <= set(meta)
    assert meta["issuer"] == server.settings.issuer == server.url
    assert meta["jwks_uri"] == f"{server.url}/.well-known/jwks.json"
    assert meta["authorization_endpoint"] == f"{server.url}/oauth/"
    assert meta["token_endpoint"] == f"{server.url}/oauth/token"
    assert meta["response_types_supported"] == ["code"]
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert set(meta["grant_types_supported"]) == {"authorization_code", "refresh_token",
                                                  "urn:ietf:params:oauth:grant-type:device_code"}
    assert len(meta["scopes_supported"]) == 12 and meta["scopes_supported"][:3] == ["openid", "profile", "email"]
    assert "offline_access" not in meta["scopes_supported"]
    # OpenID Connect Discovery 1.0: the same object at its own well-known path (contract 8)
    assert (await server.client.get("/.well-known/openid-configuration")).json == meta
    for key, value in meta.items():  # RFC 8414 2: URLs are https in production, absolute always
        if key.endswith(("_endpoint", "_uri")) or key == "issuer":
            assert value.startswith("http") and "?" not in value and "#" not in value


async def test_one_signing_key_survives_restarts(tmp_path, database_url):
    first = await start_server(tmp_path, database_url)
    kid = first.services.keyring.signer.kid
    kids = {signer.kid for signer in first.services.keyring.signers.values()}
    assert len(kids) == 2  # ES256 for access tokens, RS256 for ID tokens
    first.client.close()
    await first.running.stop()
    second = await start_server(tmp_path, database_url)
    try:
        assert second.services.keyring.signer.kid == kid
        assert {signer.kid for signer in second.services.keyring.signers.values()} == kids
        published = [k["kid"] for k in (await second.client.get("/.well-known/jwks.json")).json["keys"]]
        assert sorted(published) == sorted(kids)
    finally:
        second.client.close()
        await second.running.stop()


def test_opaque_secrets_carry_256_bits():
    secret = opaque.new_secret(opaque.CODE)
    assert secret.startswith("lba_ac_") and len(secret) == len("lba_ac_") + 43
    assert len({opaque.new_secret(opaque.CODE) for _ in range(1000)}) == 1000


async def test_metadata_has_every_field_of_contract_8_that_exists_today(server):
    meta = (await server.client.get("/.well-known/oauth-authorization-server")).json
    client_auth = ["client_secret_basic", "client_secret_post"]
    base = server.url
    assert meta == {
        "issuer": server.settings.issuer,
        "authorization_endpoint": f"{base}/oauth/",
        "token_endpoint": f"{base}/oauth/token",
        "jwks_uri": f"{base}/.well-known/jwks.json",
        "userinfo_endpoint": f"{base}/oauth/userinfo",
        "end_session_endpoint": f"{base}/oauth/logout",
        "revocation_endpoint": f"{base}/oauth/revoke",
        "introspection_endpoint": f"{base}/oauth/introspect",
        "pushed_authorization_request_endpoint": f"{base}/oauth/par",  # RFC 9126 5
        "device_authorization_endpoint": f"{base}/oauth/device_authorization",  # RFC 8628 4
        "require_pushed_authorization_requests": False,
        "dpop_signing_alg_values_supported": ["ES256", "EdDSA", "RS256"],  # RFC 9449 5.1
        "scopes_supported": ["openid", "profile", "email", "userinfo", "memory.read", "chat.read", "chat.write",
                             "note.write", "voice", "plaza.read", "plaza.write", "agent_memory"],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token",
                                  "urn:ietf:params:oauth:grant-type:device_code"],  # RFC 8628 4
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": [*client_auth, "none"],  # public clients (contract 17)
        "revocation_endpoint_auth_methods_supported": [*client_auth, "none"],
        "introspection_endpoint_auth_methods_supported": client_auth,
        "subject_types_supported": ["pairwise"],
        "id_token_signing_alg_values_supported": ["RS256", "ES256", "EdDSA"],  # RS256 first (contract 15)
        "claims_supported": ["sub", "iss", "aud", "exp", "iat", "auth_time", "nonce", "at_hash", "sid", "amr",
                             "acr", "name", "picture", "email", "email_verified"],
        "acr_values_supported": ["phr", "urn:lbauth:acr:mfa", "urn:lbauth:acr:pwd"],
        "claims_parameter_supported": False,
        "request_parameter_supported": False,
        "request_uri_parameter_supported": False,
        "authorization_response_iss_parameter_supported": True,  # RFC 9207
        "client_id_metadata_document_supported": True,  # contract 17
        "revocation_feed_endpoint": f"{base}/api/oauth/revocations",
        "registration_endpoint": f"{base}/oauth/register",  # RFC 7591 (contract 17)
    }


@pytest.mark.parametrize("issuer_path", ["/tenant", "/a/b"])
async def test_an_issuer_with_a_path_is_served_where_rfc_8414_puts_it(tmp_path, database_url, issuer_path):
    issuer = "https://auth.example.com" + issuer_path
    srv = await start_server(tmp_path, database_url, issuer=issuer)
    try:
        r = await srv.client.get("/.well-known/oauth-authorization-server" + issuer_path)
        assert r.status == 200 and r.headers["Content-Type"].startswith("application/json")
        assert r.json["issuer"] == issuer  # byte for byte
        assert r.json == (await srv.client.get("/.well-known/oauth-authorization-server")).json
        # OpenID Connect Discovery: RFC 8414 3.1's place and the issuer's own path (contract 8)
        for path in ("/.well-known/openid-configuration" + issuer_path,
                     issuer_path + "/.well-known/openid-configuration", "/.well-known/openid-configuration"):
            assert (await srv.client.get(path)).json == r.json, path
        for other in ("/other", issuer_path + "/", issuer_path + "x", "/" + issuer_path.upper().lstrip("/")):
            (await srv.client.get("/.well-known/oauth-authorization-server" + other)).assert_error(
                404, "request.not_found")
            (await srv.client.get("/.well-known/openid-configuration" + other)).assert_error(
                404, "request.not_found")
    finally:
        srv.client.close()
        await srv.running.stop()

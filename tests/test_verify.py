"""lbauth.verify for resource services (contract section 9): discovery, caching, the refusals of
contract section 6, revocations within 5 s, unknown kids, and the Tornado decorator."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac as hmac_mod
import json
import subprocess
import sys
import time

import jwt
import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web
from cryptography.hazmat.primitives import serialization

from lbauth.clock import FrozenClock
from lbauth.core.crypto import keys
from lbauth.server import start
from lbauth.verify import TokenError, Verifier, metadata_url, requires_token
from tests.client import Client
from tests.conftest import ROOT, START_TIME, TestServer, make_settings
from tests.flow_helpers import code_for, full_setup, tokens_for
from tests.support import unverified_claims


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict, claims: dict, signature: bytes = b"") -> str:
    return "lba_at_" + ".".join([b64(json.dumps(header).encode()), b64(json.dumps(claims).encode()), b64(signature)])


@pytest.fixture
async def verifier(server):
    v = Verifier(server.url, server.settings.audience, clock=server.clock.now, poll_seconds=0.2)
    await v.arefresh()
    yield v
    v.close()


async def claims_of(server) -> tuple[str, dict]:
    s = await full_setup(server)
    token = (await tokens_for(server, s))["accessToken"]
    return token, unverified_claims(token)


def sign(server, claims: dict, **header) -> str:
    signer = server.services.keyring.signer
    return "lba_at_" + jwt.encode(claims, signer.private_key, algorithm=signer.alg,
                                  headers={"kid": signer.kid, "typ": "at+jwt", **header})


def test_importing_lbauth_verify_pulls_in_no_server_dependency():
    code = ("import sys, lbauth.verify; heavy = {'tornado', 'sqlalchemy', 'asyncpg', 'aiosqlite', 'jinja2', "
            "'alembic', 'argon2'}; print(sorted(m for m in sys.modules if m.split('.')[0] in heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


async def test_verifies_a_token_found_through_the_metadata(server, verifier):
    token, expected = await claims_of(server)
    claims = verifier.verify(token, required_scopes=["userinfo"])
    assert claims == expected
    assert verifier.verify(token, required_scopes="userinfo") == expected  # a string is one scope
    with pytest.raises(TokenError) as info:
        verifier.verify(token, required_scopes=["chat.write"])
    assert (info.value.sub_code, info.value.status) == ("oauth2.scope.insufficient", 403)


async def test_verify_does_no_io(server, verifier):
    token, _ = await claims_of(server)
    await server.running.stop()  # the server is gone: verification goes on from the caches
    server.running.stop = _noop
    assert verifier.verify(token)["sub"]


async def _noop() -> None:
    return None


def _refused(verifier, token, sub_code="oauth2.token.invalid", status=401) -> None:
    with pytest.raises(TokenError) as info:
        verifier.verify(token)
    assert (info.value.sub_code, info.value.status) == (sub_code, status), info.value.message


async def test_hardening_refusals(server, verifier):
    token, claims = await claims_of(server)
    kid = server.services.keyring.signer.kid
    public_pem = server.services.keyring.signer.private_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    _refused(verifier, forge({"alg": "none", "kid": kid, "typ": "at+jwt"}, claims))
    # HS256 keyed with the public key: the classic algorithm confusion attack
    header = {"alg": "HS256", "kid": kid, "typ": "at+jwt"}
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    mac = hmac_mod.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    _refused(verifier, f"lba_at_{signing_input}.{b64(mac)}")
    _refused(verifier, sign(server, claims, kid="not-in-the-jwks"))
    _refused(verifier, sign(server, {**claims, "iss": "https://evil.example"}))
    _refused(verifier, sign(server, {**claims, "aud": "https://other-api.example"}))
    for missing in ("jti", "exp", "iat", "iss", "aud", "sub"):
        _refused(verifier, sign(server, {k: v for k, v in claims.items() if k != missing}))
    _refused(verifier, sign(server, claims, typ="JWT"))
    no_typ = jwt.api_jws.PyJWS().encode(json.dumps(claims).encode(), server.services.keyring.signer.private_key,
                                        algorithm="ES256", headers={"kid": kid, "typ": None})
    assert "typ" not in jwt.get_unverified_header(no_typ)
    _refused(verifier, "lba_at_" + no_typ)
    _refused(verifier, "lba_at_" + token)  # the prefix is stripped exactly once
    _refused(verifier, token[7:])  # no prefix at all
    _refused(verifier, token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB"))
    # another key with the same kid
    other = keys.generate_private_key("ES256")
    _refused(verifier, "lba_at_" + jwt.encode(claims, other, algorithm="ES256", headers={"kid": kid, "typ": "at+jwt"}))


async def test_other_credentials_are_not_access_tokens(server, verifier):
    s = await full_setup(server)
    tokens = await tokens_for(server, s)
    code = await code_for(server, s)
    for credential in (tokens["refreshToken"], code, s.token, s.client_secret, ""):
        _refused(verifier, credential)


async def test_expiry_with_bounded_leeway(server):
    token, claims = await claims_of(server)
    strict = Verifier(server.url, server.settings.audience, clock=server.clock.now, leeway=0)
    lenient = Verifier(server.url, server.settings.audience, clock=server.clock.now, leeway=60)
    await strict.arefresh()
    await lenient.arefresh()
    server.clock.advance(7200 + 30)
    _refused(strict, token, "oauth2.token.expired")
    assert lenient.verify(token)["jti"] == claims["jti"]
    server.clock.advance(31)
    _refused(lenient, token, "oauth2.token.expired")
    with pytest.raises(ValueError):
        Verifier(server.url, server.settings.audience, leeway=61)
    # A token issued in the future (beyond leeway) is not accepted either.
    now = int(server.clock.now())
    _refused(strict, sign(server, {**claims, "iat": now + 120, "exp": now + 9000}))


async def test_a_revoked_grant_is_refused_within_5_seconds(server):
    s = await full_setup(server)
    token = (await tokens_for(server, s))["accessToken"]
    verifier = Verifier(server.url, server.settings.audience, clock=server.clock.now, poll_seconds=0.5)
    await asyncio.to_thread(verifier.start)
    try:
        assert verifier.verify(token)
        assert (await server.client.delete(f"/api/auth/authorizations/{s.client_id}", bearer=s.token)).status == 200
        started = time.monotonic()
        while time.monotonic() - started < 5:
            try:
                verifier.verify(token)
            except TokenError as exc:
                assert exc.sub_code == "oauth2.token.revoked"
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("still accepted 5 s after the revocation")
    finally:
        await asyncio.to_thread(verifier.close)


async def test_an_unknown_kid_fetches_the_jwks_again_at_a_bounded_rate(server):
    verifier = Verifier(server.url, server.settings.audience, clock=server.clock.now, poll_seconds=0.1,
                        unknown_kid_seconds=1.0)
    await asyncio.to_thread(verifier.start)
    try:
        s = await full_setup(server)
        staged = await keys.stage_key(server.db, server.clock, server.services.master_keys, "ES256")
        await keys.promote_key(server.db, server.clock, force=True)
        await server.services.reload_keys()
        token = (await tokens_for(server, s))["accessToken"]
        assert jwt.get_unverified_header(token[7:])["kid"] == staged["kid"]
        fetches = verifier.jwks_fetches
        _refused(verifier, token)  # not known yet: refused, and a fetch is asked for
        for _ in range(100):
            await asyncio.sleep(0.05)
            if staged["kid"] in verifier.keys:
                break
        assert verifier.verify(token)["jti"]
        assert verifier.jwks_fetches == fetches + 1

        # A flood of tokens with made-up kids asks for at most one fetch per second.
        bogus = [sign(server, {"sub": "x"}, kid=f"bogus-{i}") for i in range(50)]
        before = verifier.jwks_fetches
        for token in bogus:
            _refused(verifier, token)
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        assert verifier.jwks_fetches - before <= 2
    finally:
        await asyncio.to_thread(verifier.close)


async def test_max_staleness_fails_closed_until_a_refresh_succeeds(server):
    """With `max_staleness`, a copy of the revocation list older than that refuses every token
    (503): a revocation it cannot hear about is never let through. A successful refresh ends it."""
    token, _ = await claims_of(server)
    strict = Verifier(server.url, server.settings.audience, clock=server.clock.now, max_staleness=30)
    lenient = Verifier(server.url, server.settings.audience, clock=server.clock.now)
    for v in (strict, lenient):
        await v.arefresh()
        assert v.verify(token)["jti"] and v.refreshed_at == server.clock.now()

    server.clock.advance(30)
    assert strict.verify(token)
    server.clock.advance(1)
    _refused(strict, token, "server.unavailable", 503)
    assert lenient.verify(token)  # the default keeps verifying with the last copy

    await strict.arefresh()
    assert strict.verify(token)


async def test_before_the_first_refresh_it_says_unavailable(server):
    token, _ = await claims_of(server)
    _refused(Verifier(server.url, server.settings.audience), token, "server.unavailable", 503)


async def test_tornado_decorator_protects_a_resource_service(server, verifier):
    class Notes(tornado.web.RequestHandler):
        @requires_token(verifier, "userinfo")
        async def get(self) -> None:
            self.write({"user": self.token_claims["sub"]})

    class Voice(tornado.web.RequestHandler):
        @requires_token(verifier, "voice")
        def get(self) -> None:
            self.write({"ok": True})

    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    service = tornado.httpserver.HTTPServer(tornado.web.Application([("/notes", Notes), ("/voice", Voice)]))
    service.add_sockets(sockets)
    client = Client(f"http://127.0.0.1:{sockets[0].getsockname()[1]}")
    try:
        token, claims = await claims_of(server)
        ok = await client.get("/notes", bearer=token)
        assert ok.status == 200 and ok.json == {"user": claims["sub"]}
        missing = await client.get("/notes")
        assert missing.status == 401 and missing.headers["WWW-Authenticate"] == "Bearer"
        assert missing.json["subCode"] == "oauth2.token.missing"
        bad = await client.get("/notes", bearer="lba_at_nope")
        assert bad.status == 401 and bad.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
        scope = await client.get("/voice", bearer=token)
        assert scope.status == 403 and scope.json == {"code": 403, "subCode": "oauth2.scope.insufficient",
                                                      "message": scope.json["message"]}
        assert scope.headers["WWW-Authenticate"] == 'Bearer error="insufficient_scope"'
    finally:
        client.close()
        service.stop()


def test_checklist_size_does_not_change_the_cost_of_a_check():
    from lbauth.verify import CheckList, Entry
    big = CheckList()
    big.add(Entry(i, f"gnt_{i}", f"jti_{i}", 100, 10_000) for i in range(100_000))
    assert len(big) == 200_000
    assert big.is_revoked("gnt_99999", None, 50) and not big.is_revoked("gnt_x", "jti_y", 50)
    assert not big.is_revoked("gnt_5", None, 101)  # issued after the revocation


# ---- discovery (contract 9; RFC 8414 3.1 and 3.3) ---------------------------------------------------------

def test_the_metadata_location_is_the_rfc_8414_one():
    assert metadata_url("https://auth.example.com") == "https://auth.example.com/.well-known/oauth-authorization-server"
    assert metadata_url("https://h.example:8443/tenant") == \
        "https://h.example:8443/.well-known/oauth-authorization-server/tenant"
    assert metadata_url("https://h.example/a/b/") == "https://h.example/.well-known/oauth-authorization-server/a/b"


async def test_an_issuer_with_a_path_is_discovered_where_rfc_8414_puts_it(tmp_path, database_url):
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    issuer = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/tenant"
    settings = make_settings(tmp_path, database_url, sockets[0].getsockname()[1], issuer=issuer)
    clock = FrozenClock(START_TIME)
    srv = TestServer(await start(settings, clock=clock, sockets=sockets), clock)
    verifier = Verifier(issuer, settings.audience, clock=srv.clock.now)
    try:
        token, claims = await claims_of(srv)
        await verifier.arefresh()
        assert claims["iss"] == issuer
        assert verifier.verify(token) == claims
    finally:
        verifier.close()
        srv.client.close()
        await srv.running.stop()


async def test_metadata_naming_another_issuer_is_refused(server):
    """RFC 8414 3.3: the `issuer` in the document must be the configured issuer, byte for byte; a
    trailing slash is another issuer."""
    for configured in (server.url + "/", server.url.replace("127.0.0.1", "localhost")):
        verifier = Verifier(configured, server.settings.audience, clock=server.clock.now)
        with pytest.raises(ValueError, match="identical"):
            await verifier.arefresh()
        with pytest.raises(TokenError) as info:
            verifier.verify("lba_at_x.y.z")
        assert info.value.status == 503  # nothing was trusted: no keys

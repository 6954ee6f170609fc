"""lbauth.verify for resource services (contract section 9): discovery, caching, the refusals of
contract section 6, revocations within 5 s, unknown kids, the Tornado decorator, and step-up at the
resource (RFC 9470: `acr_values`, `max_age`, the `insufficient_user_authentication` challenge)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac as hmac_mod
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import jwt
import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web
from cryptography.hazmat.primitives import serialization

from lbauth.clock import FrozenClock
from lbauth.core.crypto import keys
from lbauth.server import start
from lbauth.verify import AccessTokenClaims, TokenError, Verifier, metadata_url, requires_token
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
                        unknown_kid_seconds=1.0, timeout=15.0)  # a loaded CI machine answered in over 5 s
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


# ---- step-up at the resource (RFC 9470; contract 19) ------------------------------------------------------

PASSKEY = {"acr": "phr", "amr": ["hwk", "user", "mfa"]}
TOTP = {"acr": "urn:lbauth:acr:mfa", "amr": ["pwd", "otp", "mfa"]}
PASSWORD = {"acr": "urn:lbauth:acr:pwd", "amr": ["pwd"]}
SIGN_IN_CLAIMS = ("acr", "amr", "auth_time")
WEAK = "This resource needs a stronger sign-in than the access token's."
STALE = "This resource needs a more recent sign-in than the access token's."


async def signed_in_with(server, sign_in: dict | None, *, auth_time: float | None = None,
                         scope: str = "userinfo agent_memory") -> str:
    """A real token's claims, re-signed with the server's key, saying how the user signed in (`sign_in`'s
    `acr` and `amr`, and `auth_time`: now by default); None: a token that says nothing about it."""
    _, claims = await claims_of(server)
    claims = {k: v for k, v in claims.items() if k not in SIGN_IN_CLAIMS}
    claims["scope"] = scope
    if sign_in is not None:
        claims.update(sign_in, auth_time=int(server.clock.now() if auth_time is None else auth_time))
    return sign(server, claims)


@contextlib.asynccontextmanager
async def resource_service(*routes) -> AsyncIterator[Client]:
    """A small Tornado resource service on a loopback port, and an HTTP client for it."""
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    service = tornado.httpserver.HTTPServer(tornado.web.Application(list(routes)))
    service.add_sockets(sockets)
    client = Client(f"http://127.0.0.1:{sockets[0].getsockname()[1]}")
    try:
        yield client
    finally:
        client.close()
        service.stop()


def sign_in_of(handler: tornado.web.RequestHandler) -> None:
    claims = handler.token_claims
    handler.finish({"acr": claims.acr, "amr": list(claims.amr), "authTime": claims.auth_time,
                    "sub": claims.subject, "scopes": list(claims.scopes), "plainDict": isinstance(claims, dict)})


async def test_forgetting_agent_memory_demands_a_passkey_sign_in(server, verifier):
    """`requires_token(..., acr_values=("phr",))`: a password or TOTP sign-in, or a token that does not
    say, gets 401 with exactly the RFC 9470 3 challenge (and the lbauth envelope); a passkey sign-in passes
    and the handler sees it through `token_claims.acr`."""
    metadata = "https://memory.example/.well-known/oauth-protected-resource/mcp"

    class Forget(tornado.web.RequestHandler):
        @requires_token(verifier, "agent_memory", acr_values=("phr",))
        def delete(self) -> None:
            sign_in_of(self)

    class ForgetMcp(tornado.web.RequestHandler):
        @requires_token(verifier, "agent_memory", acr_values="phr", resource_metadata=metadata)
        def delete(self) -> None:
            sign_in_of(self)

    async with resource_service(("/memory", Forget), ("/mcp/memory", ForgetMcp)) as client:
        password = await signed_in_with(server, PASSWORD)
        refused = await client.delete("/memory", bearer=password)
        assert refused.status == 401
        assert refused.headers["WWW-Authenticate"] == (
            f'Bearer error="insufficient_user_authentication", error_description="{WEAK}", acr_values="phr"')
        assert refused.json == {"code": 401, "message": WEAK,
                                "subCode": "oauth2.token.insufficient_user_authentication"}
        # With RFC 9728 metadata: the same challenge naming the document, and no `scope` (the scopes were fine).
        mcp = await client.delete("/mcp/memory", bearer=password)
        assert mcp.status == 401 and mcp.headers["WWW-Authenticate"] == (
            f'Bearer error="insufficient_user_authentication", error_description="{WEAK}", acr_values="phr", '
            f'resource_metadata="{metadata}"')
        for falls_short in (await signed_in_with(server, TOTP), await signed_in_with(server, None)):
            answer = await client.delete("/memory", bearer=falls_short)
            assert answer.status == 401 and answer.json["subCode"] == "oauth2.token.insufficient_user_authentication"

        passkey = await signed_in_with(server, PASSKEY)
        for path in ("/memory", "/mcp/memory"):
            ok = await client.delete(path, bearer=passkey)
            assert ok.status == 200, ok.text
            assert ok.json["acr"] == "phr" and ok.json["amr"] == ["hwk", "user", "mfa"]
            assert ok.json["authTime"] == int(server.clock.now()) and ok.json["plainDict"] is True
            assert ok.json["scopes"] == ["userinfo", "agent_memory"]
            assert ok.json["sub"] == unverified_claims(passkey)["sub"]

        # The scope is checked first: a password token without agent_memory is 403, not a step-up.
        no_scope = await client.delete("/memory", bearer=await signed_in_with(server, PASSWORD, scope="userinfo"))
        assert no_scope.status == 403 and no_scope.json["subCode"] == "oauth2.scope.insufficient"


async def test_max_age_refuses_a_sign_in_older_than_it_by_the_verifiers_clock(server, verifier):
    """`max_age=300`: a sign-in 300 s old passes, 301 s old gets the challenge naming both requirements
    (`max_age` a bare integer), and a fresh sign-in passes again. A token without `auth_time` is refused."""
    metadata = "https://memory.example/.well-known/oauth-protected-resource"

    class Forget(tornado.web.RequestHandler):
        @requires_token(verifier, "agent_memory", acr_values=("phr", "urn:lbauth:acr:mfa"), max_age=300,
                        resource_metadata=metadata)
        def post(self) -> None:
            sign_in_of(self)

    async with resource_service(("/forget", Forget)) as client:
        totp = await signed_in_with(server, TOTP)
        assert (await client.post("/forget", bearer=totp)).status == 200
        server.clock.advance(300)
        assert (await client.post("/forget", bearer=totp)).status == 200
        server.clock.advance(1)
        stale = await client.post("/forget", bearer=totp)
        assert stale.status == 401 and stale.json["message"] == STALE
        assert stale.headers["WWW-Authenticate"] == (
            f'Bearer error="insufficient_user_authentication", error_description="{STALE}", '
            f'acr_values="phr urn:lbauth:acr:mfa", max_age=300, resource_metadata="{metadata}"')

        fresh = await signed_in_with(server, TOTP)  # the user signed in again: auth_time is now
        ok = await client.post("/forget", bearer=fresh)
        assert ok.status == 200 and ok.json["authTime"] == int(server.clock.now())

        _, claims = await claims_of(server)
        no_auth_time = sign(server, {**{k: v for k, v in claims.items() if k not in SIGN_IN_CLAIMS},
                                     "scope": "agent_memory", "acr": "phr", "amr": ["hwk", "user", "mfa"]})
        refused = await client.post("/forget", bearer=no_auth_time)
        assert refused.status == 401 and refused.json["message"] == STALE


async def test_verify_step_up_requirements_and_backward_compatibility(server, verifier):
    """`Verifier.verify(..., acr_values=, max_age=)`: exact membership of `acr` (no ordering of strength),
    a token without `acr` meets no `acr_values`; without requirements every token passes as before."""
    plain = await signed_in_with(server, None)
    password = await signed_in_with(server, PASSWORD, auth_time=server.clock.now() - 100)

    for token in (plain, password):  # nothing asked for: accepted, as before this existed
        assert verifier.verify(token, ["agent_memory"])["jti"]
        assert verifier.verify(token, acr_values=(), max_age=None)["jti"]

    with pytest.raises(TokenError) as info:
        verifier.verify(plain, acr_values=["urn:lbauth:acr:pwd"])
    error = info.value
    assert (error.sub_code, error.status, error.acr_values, error.max_age) == (
        "oauth2.token.insufficient_user_authentication", 401, ("urn:lbauth:acr:pwd",), None)
    assert error.challenge == ('Bearer error="insufficient_user_authentication", '
                               f'error_description="{WEAK}", acr_values="urn:lbauth:acr:pwd"')

    assert verifier.verify(password, acr_values=["urn:lbauth:acr:pwd"]).acr == "urn:lbauth:acr:pwd"
    # A token from the real flow (a password sign-in) says so, and is judged the same way.
    real, _ = await claims_of(server)
    assert verifier.verify(real, acr_values=["urn:lbauth:acr:pwd"], max_age=60).amr == ("pwd",)
    with pytest.raises(TokenError):
        verifier.verify(real, acr_values=["phr"])
    # Listing `phr` does not make a weaker value acceptable, and a stronger one is not implied either.
    with pytest.raises(TokenError):
        verifier.verify(await signed_in_with(server, PASSKEY), acr_values=["urn:lbauth:acr:mfa"])
    # A string is a space-separated list, as on the wire.
    assert verifier.verify(password, acr_values="phr urn:lbauth:acr:pwd").acr == "urn:lbauth:acr:pwd"

    assert verifier.verify(password, max_age=100).auth_time == int(server.clock.now()) - 100
    with pytest.raises(TokenError) as info:
        verifier.verify(password, max_age=99)
    assert info.value.challenge.endswith(", max_age=99") and info.value.message == STALE
    with pytest.raises(TokenError) as info:
        verifier.verify(plain, max_age=3600)  # no auth_time: it cannot show the sign-in is recent
    assert info.value.max_age == 3600 and info.value.acr_values == ()

    # Bad requirements are the caller's mistake: ValueError at once, whatever the token.
    for bad in ({"acr_values": ["two words"]}, {"acr_values": ['a"b']}, {"acr_values": [""]},
                {"acr_values": [7]}, {"max_age": -1}, {"max_age": "300"}, {"max_age": True}, {"max_age": 1.5}):
        with pytest.raises(ValueError):
            verifier.verify("lba_at_nope", **bad)
        with pytest.raises(ValueError):
            requires_token(verifier, "agent_memory", **bad)


async def test_verified_claims_expose_acr_amr_and_auth_time(server, verifier):
    """`verify` returns an `AccessTokenClaims`: the same dict as before (indexable, equal to the token's
    claims), with read-only `acr`, `amr`, `auth_time`, `scopes` and `subject`."""
    signed_in_at = int(server.clock.now()) - 42
    token = await signed_in_with(server, PASSKEY, auth_time=signed_in_at)
    claims = verifier.verify(token)
    assert isinstance(claims, AccessTokenClaims) and isinstance(claims, dict)
    assert claims == unverified_claims(token) and claims["sub"] == claims.subject
    assert (claims.acr, claims.amr, claims.auth_time) == ("phr", ("hwk", "user", "mfa"), signed_in_at)
    assert claims.scopes == ("userinfo", "agent_memory")
    with pytest.raises(AttributeError):
        claims.acr = "urn:lbauth:acr:pwd"
    assert json.loads(json.dumps(claims)) == claims

    totp = verifier.verify(await signed_in_with(server, TOTP))
    assert (totp.acr, totp.amr) == ("urn:lbauth:acr:mfa", ("pwd", "otp", "mfa"))
    silent = verifier.verify(await signed_in_with(server, None))
    assert (silent.acr, silent.amr, silent.auth_time) == (None, (), None)
    _, real = await claims_of(server)
    odd = verifier.verify(sign(server, {**real, "acr": 3, "amr": "pwd", "auth_time": "yesterday"}))
    assert (odd.acr, odd.amr, odd.auth_time) == (None, (), None)

"""panva's openid-client v6 (npm; an OpenID-certified relying party) signs a user in against lbauth with
its defaults, unchanged (contract 15, issue 22).

- The issuer is served over HTTPS on loopback: a test CA and a server certificate for 127.0.0.1 and
  localhost are made here with `cryptography`; lbauth's own application is served by a second Tornado
  HTTPServer with that certificate (the same request callback as the plain listener, so the issuer,
  every endpoint and every page are lbauth's). Node trusts the CA through NODE_EXTRA_CA_CERTS; nothing
  turns on openid-client's allowInsecureRequests.
- tests/oidc_rp.mjs is the relying party: `discovery(issuer)`, the authorization URL as the README's
  quick start builds it (PKCE; no state or nonce when the server advertises PKCE), and once more with
  nonce and state; after the browser step, `authorizationCodeGrant` (expected nonce and state),
  `fetchUserInfo` (expected subject), `refreshTokenGrant` and `buildEndSessionUrl`.
- The browser step is Chromium driven by Playwright, as tests/test_browser.py does. Chromium is told to
  accept exactly the test server certificate's public key (--ignore-certificate-errors-spki-list), no
  other certificate error. The app's redirect URI is intercepted, as in the browser tests.
- The server's clock is frozen at the real time (openid-client checks iat and exp against its own).
- Without node, or without `npm ci` in tests/, the test is skipped with the reason, except under CI=true.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import ipaddress
import json
import os
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import tornado.httpserver
import tornado.netutil
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from lbauth.clock import FrozenClock
from tests.conftest import ROOT, TestServer, start_server
from tests.flow_helpers import REGISTERED_URI, redirect_query
from tests.support import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, require_browser, require_node

try:
    from playwright.async_api import Page, Request, Route, async_playwright
except ImportError:  # require_browser() reports it
    async_playwright = None

RP_SCRIPT = ROOT / "tests" / "oidc_rp.mjs"
SIGNED_OUT_URI = "https://app.example/signed-out"
SCOPE = "openid profile email"


# ---- a test CA and a server certificate -----------------------------------------------------------------

def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_certificates(directory: Path) -> tuple[Path, Path, Path, str]:
    """(ca.pem, server.pem, server.key, the server key's SPKI SHA-256 in base64) in `directory`."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("lbauth test CA")).issuer_name(_name("lbauth test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder().subject_name(_name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                                        x509.DNSName("localhost")]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    ca_pem, cert_pem, key_pem = directory / "ca.pem", directory / "server.pem", directory / "server.key"
    ca_pem.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_pem.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    spki = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return ca_pem, cert_pem, key_pem, base64.b64encode(hashlib.sha256(spki).digest()).decode()


class HttpsIssuer:
    """lbauth with its issuer and URLs on https://127.0.0.1:PORT (the TLS listener)."""

    def __init__(self, server: TestServer, tls: tornado.httpserver.HTTPServer, issuer: str, ca: Path, spki: str,
                 tls_context: ssl.SSLContext):
        self.server, self.tls, self.issuer, self.ca, self.spki = server, tls, issuer, ca, spki
        self.tls_context = tls_context  # the certificate's: a resource service on 127.0.0.1 may serve it too


@pytest.fixture
async def https_issuer(tmp_path: Path, database_url: str) -> AsyncIterator[HttpsIssuer]:
    ca, cert, key, spki = make_certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    tls_sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    issuer = f"https://127.0.0.1:{tls_sockets[0].getsockname()[1]}"
    server = await start_server(tmp_path, database_url, clock=FrozenClock(time.time()), base_url=issuer)
    tls = tornado.httpserver.HTTPServer(server.running.http_server.request_callback, ssl_options=context,
                                        max_body_size=server.settings.max_body_bytes)
    tls.add_sockets(tls_sockets)
    try:
        yield HttpsIssuer(server, tls, issuer, ca, spki, context)
    finally:
        tls.stop()
        server.client.close()
        await server.running.stop()


async def rp(node: str, issuer: HttpsIssuer, step: str, document: dict[str, Any],
             script: Path = RP_SCRIPT) -> dict[str, Any]:
    """Run one step of tests/oidc_rp.mjs, or another client `script` (in a child process: the
    server keeps serving)."""
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": str(issuer.ca)}
    env.pop("NODE_TLS_REJECT_UNAUTHORIZED", None)
    process = await asyncio.create_subprocess_exec(
        node, str(script), step, json.dumps(document), cwd=ROOT / "tests", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, f"openid-client {step} failed: {out.decode()} {err.decode()[-2000:]}"
    return json.loads(out)


@asynccontextmanager
async def signed_in_page(issuer: HttpsIssuer, url: str, email: str, password: str) -> AsyncIterator[Page]:
    """A Chromium page that trusts the issuer's certificate, opened at `url`, where the user signs in."""
    require_browser()
    args = [*CHROMIUM_ARGS, f"--ignore-certificate-errors-spki-list={issuer.spki}"]
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=args, headless=True)
        try:
            context = await chromium.new_context()
            context.set_default_timeout(TIMEOUT_MS)
            page = await context.new_page()

            async def answer_for_the_app(route: Route) -> None:
                await route.fulfill(status=200, content_type="text/html; charset=utf-8",
                                    body="<!doctype html><title>app</title><p>Redirect received by the app.</p>")
            await page.route("https://app.example/**", answer_for_the_app)
            response = await page.goto(url)
            assert response is not None and response.status == 200, response and response.status
            await page.get_by_label("Email", exact=True).fill(email)
            await page.get_by_label("Password", exact=True).fill(password)
            await page.get_by_role("button", name="Sign in", exact=True).click()
            yield page
        finally:
            await chromium.close()


async def browser_step(issuer: HttpsIssuer, url: str, email: str, password: str) -> str:
    """Chromium opens the authorization URL, signs in, approves; the URL the app's redirect URI got."""
    async with signed_in_page(issuer, url, email, password) as page:
        def to_the_app(request: Request) -> bool:
            return request.url.startswith(REGISTERED_URI)
        async with page.expect_request(to_the_app) as caught:
            await page.get_by_role("button", name="Approve").click()
        return (await caught.value).url


@pytest.mark.slow
@pytest.mark.parametrize("with_nonce", [False, True], ids=["readme-quick-start", "nonce-and-state"])
async def test_openid_client_signs_in_reads_userinfo_refreshes_and_builds_the_logout_url(https_issuer, with_nonce):
    node = require_node("openid-client")
    require_browser()
    server = https_issuer.server
    user = await server.create_user(name="Grace Hopper", email_verified=True)
    app = await server.create_app(user["email"], name="Moonbeam Notes", redirect_uris=[REGISTERED_URI],
                                  post_logout_redirect_uris=[SIGNED_OUT_URI])
    common = {"issuer": https_issuer.issuer, "clientId": app["clientId"], "clientSecret": app["clientSecret"],
              "redirectUri": REGISTERED_URI, "scope": SCOPE}

    started = await rp(node, https_issuer, "start", {**common, "withNonce": with_nonce})
    assert started["supportsPKCE"] is True
    query = parse_qs(urlsplit(started["url"]).query)
    assert started["url"].startswith(https_issuer.issuer + "/oauth/")
    assert query["code_challenge_method"] == ["S256"] and query["scope"] == [SCOPE]
    if with_nonce:
        assert query["nonce"] == [started["nonce"]] and query["state"] == [started["state"]]
    else:  # the quick start: PKCE is advertised, so neither state nor nonce
        assert "state" not in query and "nonce" not in query

    callback = await browser_step(https_issuer, started["url"], user["email"], user["password"])
    landed = redirect_query(callback, REGISTERED_URI)
    assert landed["iss"] == [https_issuer.issuer] and "code" in landed

    done = await rp(node, https_issuer, "finish", {**common, "callbackUrl": callback,
                                                   "codeVerifier": started["codeVerifier"],
                                                   "state": started["state"], "nonce": started["nonce"],
                                                   "postLogoutRedirectUri": SIGNED_OUT_URI})
    claims, tokens = done["claims"], done["tokens"]
    assert tokens["token_type"].lower() == "bearer" and tokens["access_token"].startswith("lba_at_")
    assert claims["iss"] == https_issuer.issuer and claims["aud"] == app["clientId"]
    assert claims["amr"] == ["pwd"] and claims["sid"].startswith("ses_")
    assert (claims.get("nonce") == started["nonce"]) if with_nonce else ("nonce" not in claims)
    me = await server.client.get("/api/auth/me", bearer=tokens["access_token"])
    assert claims["sub"] == me.data["appScopedUserId"] != user["userId"]
    assert done["userinfo"] == {"sub": claims["sub"], "name": "Grace Hopper", "email": user["email"],
                                "email_verified": True}
    assert done["refreshed"]["access_token"] != tokens["access_token"]
    assert done["refreshedClaims"]["sub"] == claims["sub"]
    assert done["refreshedClaims"]["auth_time"] == claims["auth_time"]

    end = urlsplit(done["endSessionUrl"])
    assert f"{end.scheme}://{end.netloc}{end.path}" == https_issuer.issuer + "/oauth/logout"
    assert parse_qs(end.query) == {"id_token_hint": [tokens["id_token"]], "client_id": [app["clientId"]],
                                   "post_logout_redirect_uri": [SIGNED_OUT_URI], "state": ["bye-123"]}

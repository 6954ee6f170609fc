"""RFC 9470 step-up, end to end, with a passkey (issue 31's proof): a resource service demands a
phishing-resistant sign-in for forgetting agent memory; the client's token, from a password
sign-in, is refused with the RFC 9470 3 challenge; the client authorizes again with the challenge's
`acr_values`; the user, in Chromium, is asked for their passkey only, uses it, and the new token
passes.

- The resource service is Tornado with `lbauth.verify.requires_token(verifier, "agent_memory",
  acr_values=("phr",))`, as a real one is built (tests/test_verify.py).
- The client is Authlib's OAuth2Session (PKCE, nonce); its ID tokens are validated by Authlib's
  CodeIDToken against the JWKS (tests/test_oidc_authlib.py).
- The user is Chromium with a virtual authenticator (tests/test_passkeys.py), at
  http://localhost:PORT; the app's redirect URI is intercepted in the tab, the code read there.
- panva's openid-client (Node, tests/oidc_rp.mjs unchanged) reads the same sign-in's amr and acr
  from the ID token it validates, against lbauth at https://localhost:PORT.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web
from authlib.common.security import generate_token
from authlib.integrations.requests_client import OAuth2Session

from lbauth.clock import FrozenClock
from lbauth.verify import Verifier, requires_token
from tests.conftest import running_server, start_server
from tests.flow_helpers import REGISTERED_URI
from tests.support import CHROMIUM, CHROMIUM_ARGS, require_browser, require_node, unverified_claims
from tests.test_oidc_authlib import discovery, validated
from tests.test_oidc_openid_client import SIGNED_OUT_URI, HttpsIssuer, make_certificates, rp
from tests.test_passkeys import add_passkey, device, sign_in_with_password
from tests.test_verify import resource_service

SCOPE = "openid agent_memory"
CHALLENGE = re.compile(r'^Bearer error="insufficient_user_authentication", error_description="[^"]*", '
                       r'acr_values="(?P<acr_values>[^"]*)"$')


@pytest.fixture
async def local_server(tmp_path, database_url):
    """lbauth at http://localhost:PORT (Chromium refuses 127.0.0.1 as a WebAuthn relying party)."""
    async with running_server(tmp_path, database_url, localhost=True) as srv:
        yield srv


@contextlib.asynccontextmanager
async def memory_service(server: Any) -> AsyncIterator[Any]:
    """A resource service whose DELETE /memory needs `agent_memory` and a passkey sign-in (`phr`)."""
    verifier = Verifier(server.url, server.settings.audience, clock=server.clock.now, poll_seconds=0.2)
    await verifier.arefresh()

    class Forget(tornado.web.RequestHandler):
        @requires_token(verifier, "agent_memory", acr_values=("phr",))
        def delete(self) -> None:
            claims = self.token_claims
            self.finish({"forgotten": True, "acr": claims.acr, "amr": list(claims.amr)})

    try:
        async with resource_service(("/memory", Forget)) as client:
            yield client
    finally:
        verifier.close()


class Client:
    """The app: Authlib's OAuth2Session, one authorization at a time."""

    def __init__(self, server: Any, app: dict, meta: dict) -> None:
        self.server, self.app, self.meta = server, app, meta
        self.session = OAuth2Session(app["clientId"], app["clientSecret"], scope=SCOPE, redirect_uri=REGISTERED_URI,
                                     code_challenge_method="S256")
        self.verifier = self.nonce = ""

    def authorization_url(self, **extra: str) -> str:
        self.verifier, self.nonce = generate_token(48), generate_token(20)
        url, _ = self.session.create_authorization_url(self.meta["authorization_endpoint"],
                                                       code_verifier=self.verifier, nonce=self.nonce, **extra)
        return url

    async def tokens(self, callback: str) -> dict:
        return await asyncio.to_thread(self.session.fetch_token, self.meta["token_endpoint"],
                                       authorization_response=callback, code_verifier=self.verifier)


async def at_the_app(d: Any, action: Any) -> tuple[str, bool]:
    """Do `action` in the tab; approve if the consent page comes. The URL the app's redirect URI
    got, and whether the consent page came."""
    page = d.page
    before = len(d.tab.intercepted)
    await action()
    approve = page.get_by_role("button", name="Approve")
    await page.wait_for_function(  # the app got the redirect, or the consent page is there
        "() => location.origin === 'https://app.example' || !!document.querySelector('button[value=approve]')")
    consented = len(d.tab.intercepted) == before and await approve.count() > 0
    if consented:
        await approve.click()
    await page.wait_for_url(lambda url: url.startswith(REGISTERED_URI))
    assert len(d.tab.intercepted) == before + 1, d.tab.intercepted
    return d.tab.intercepted[-1], consented


async def test_a_resource_demanding_a_passkey_gets_one_after_rfc_9470_step_up(browser, local_server):
    from playwright.async_api import expect
    server = local_server
    user = await server.create_user()
    app = await server.create_app(user["email"], name="Agent Memory", redirect_uris=[REGISTERED_URI])
    meta, jwks = await discovery(server)
    client = Client(server, app, meta)
    async with memory_service(server) as memory, device(browser, server) as d:
        page = d.page
        await d.add_authenticator()
        # The user signed in with their password in this browser, and has added a passkey since.
        await sign_in_with_password(d, user["email"], user["password"])
        await add_passkey(d, "Laptop")

        # 1. The app's first authorization: the password sign-in is enough for the app, not for the resource.
        url = client.authorization_url()
        callback, consented = await at_the_app(d, lambda: page.goto(url))
        assert consented  # the app's first request
        first = await client.tokens(callback)
        id_token = validated(server, first["id_token"], jwks, app["clientId"], client.nonce, first["access_token"])
        assert (id_token["acr"], id_token["amr"]) == ("urn:lbauth:acr:pwd", ["pwd"])
        refused = await memory.delete("/memory", bearer=first["access_token"])
        assert refused.status == 401 and refused.json["subCode"] == "oauth2.token.insufficient_user_authentication"
        challenge = CHALLENGE.match(refused.headers["WWW-Authenticate"])
        assert challenge is not None, refused.headers["WWW-Authenticate"]
        assert challenge["acr_values"] == "phr"

        # 2. RFC 9470 4: the client asks again with the challenge's acr_values; the user is asked
        # for a passkey, and nothing else.
        server.clock.advance(30)
        url = client.authorization_url(acr_values=challenge["acr_values"])
        assert parse_qs(urlsplit(url).query)["acr_values"] == ["phr"]
        response = await page.goto(url)
        assert response is not None and response.status == 200
        await expect(page.locator("#passkey-required")).to_have_text(
            "This app asks you to confirm it is you with a passkey.")
        await expect(page.locator(".app-name")).to_have_text("Agent Memory")
        await expect(page.get_by_label("Email", exact=True)).to_have_count(0)
        await expect(page.get_by_label("Password", exact=True)).to_have_count(0)
        signed_in_at = int(server.clock.now())
        callback, _ = await at_the_app(d, page.get_by_role("button", name="Sign in with a passkey").click)
        second = await client.tokens(callback)

        # 3. The new token passes, and says how the user signed in.
        ok = await memory.delete("/memory", bearer=second["access_token"])
        assert ok.status == 200, ok.text
        assert ok.json == {"forgotten": True, "acr": "phr", "amr": ["hwk", "user", "mfa"]}
        id_token = validated(server, second["id_token"], jwks, app["clientId"], client.nonce, second["access_token"])
        access = unverified_claims(second["access_token"])
        for claims in (id_token, access):
            assert (claims["acr"], claims["amr"], claims["auth_time"]) == ("phr", ["hwk", "user", "mfa"], signed_in_at)
        assert id_token["sub"] == unverified_claims(first["id_token"])["sub"]  # the same user, for this app
        # the first token still falls short: step-up added a token, it did not upgrade the old one
        assert (await memory.delete("/memory", bearer=first["access_token"])).status == 401
        d.tab.assert_first_party()
        d.tab.assert_no_csp_violation()


# ---- panva's openid-client (Node) reads the passkey sign-in from the ID token ----------------------------

@pytest.fixture
async def https_localhost(tmp_path, database_url) -> AsyncIterator[HttpsIssuer]:
    """lbauth at https://localhost:PORT (a test CA's certificate; tests/test_oidc_openid_client.py): Node
    needs HTTPS, Chromium a host name for WebAuthn. The clock is frozen at the real time, which
    openid-client checks the ID token's iat and exp against."""
    ca, cert, key, spki = make_certificates(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    tls_sockets = tornado.netutil.bind_sockets(0, "localhost")  # 127.0.0.1 and ::1: Node may try either
    issuer = f"https://localhost:{tls_sockets[0].getsockname()[1]}"
    server = await start_server(tmp_path, database_url, clock=FrozenClock(time.time()), base_url=issuer)
    server.url = issuer  # what the browser opens
    tls = tornado.httpserver.HTTPServer(server.running.http_server.request_callback, ssl_options=context,
                                        max_body_size=server.settings.max_body_bytes)
    tls.add_sockets(tls_sockets)
    try:
        yield HttpsIssuer(server, tls, issuer, ca, spki, context)
    finally:
        tls.stop()
        server.client.close()
        await server.running.stop()


@pytest.mark.slow
async def test_openid_client_reads_a_passkey_step_up_from_the_id_token(https_localhost):
    """openid-client's own authorization URL (tests/oidc_rp.mjs, unchanged) with `acr_values=phr`
    added, as RFC 9470 4 has the client do (the script passes no extra parameter to
    buildAuthorizationUrl, which would only add it to the query); the user, signed in with a
    password, uses their passkey; openid-client's authorizationCodeGrant validates the ID token and
    its claims() are the passkey sign-in's amr and acr, kept by its refresh."""
    from playwright.async_api import async_playwright, expect
    node = require_node("openid-client")
    require_browser()
    issuer = https_localhost
    server = issuer.server
    user = await server.create_user()
    app = await server.create_app(user["email"], name="Agent Memory", redirect_uris=[REGISTERED_URI],
                                  post_logout_redirect_uris=[SIGNED_OUT_URI])
    common = {"issuer": issuer.issuer, "clientId": app["clientId"], "clientSecret": app["clientSecret"],
              "redirectUri": REGISTERED_URI, "scope": SCOPE}
    started = await rp(node, issuer, "start", {**common, "withNonce": True})
    url = started["url"] + "&" + urlencode({"acr_values": "phr"})

    args = [*CHROMIUM_ARGS, f"--ignore-certificate-errors-spki-list={issuer.spki}"]
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=args, headless=True)
        try:
            async with device(chromium, server) as d:
                await d.add_authenticator()
                await sign_in_with_password(d, user["email"], user["password"])
                await add_passkey(d, "Laptop")
                await d.page.goto(url)
                await expect(d.page.locator("#passkey-required")).to_be_visible()
                signed_in_at = int(server.clock.now())
                callback, _ = await at_the_app(d, d.page.get_by_role("button", name="Sign in with a passkey").click)
                d.tab.assert_no_csp_violation()
        finally:
            await chromium.close()

    done = await rp(node, issuer, "finish", {**common, "callbackUrl": callback, "codeVerifier": started["codeVerifier"],
                                            "state": started["state"], "nonce": started["nonce"],
                                            "postLogoutRedirectUri": SIGNED_OUT_URI})
    claims = done["claims"]
    assert (claims["acr"], claims["amr"], claims["auth_time"]) == ("phr", ["hwk", "user", "mfa"], signed_in_at)
    assert claims["iss"] == issuer.issuer and claims["nonce"] == started["nonce"]
    assert (done["refreshedClaims"]["acr"], done["refreshedClaims"]["amr"]) == ("phr", ["hwk", "user", "mfa"])

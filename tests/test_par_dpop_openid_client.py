"""Pushed authorization requests and DPoP with a client users pick: panva's openid-client v6
(tests/par_dpop_rp.mjs) pushes its request with `buildAuthorizationUrlWithPAR` (with a DPoP proof
there, RFC 9449 10.1), a real Chromium signs the user in and approves, then the client exchanges
the code, refreshes and reads UserInfo through its `getDPoPHandle`, and calls a Tornado resource
service protected by `lbauth.verify` with `fetchProtectedResource`: every token DPoP-bound, every
request with a fresh proof, over HTTPS (tests/test_oidc_openid_client.py's issuer)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
from collections.abc import AsyncIterator
from urllib.parse import parse_qs, urlsplit

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web

from lbauth.verify import Verifier, requires_token
from lbauth.verify.keys import parse_jwks
from tests import test_oidc_openid_client as issuers
from tests.conftest import ROOT
from tests.flow_helpers import REGISTERED_URI, redirect_query
from tests.support import (
    require_browser,
    require_node,
    unverified_claims,
)

https_issuer = issuers.https_issuer  # the fixture: lbauth on https://127.0.0.1:PORT
SCRIPT = ROOT / "tests" / "par_dpop_rp.mjs"
SCOPE = "openid userinfo profile"


def thumbprint(jwk: dict) -> str:
    """RFC 7638 3 for an EC key, computed here."""
    canonical = json.dumps({name: jwk[name] for name in ("crv", "kty", "x", "y")}, separators=(",", ":"))
    return base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()


async def notes_service(issuer: issuers.HttpsIssuer) -> AsyncIterator[str]:
    """A resource service on HTTPS (the issuer's certificate) whose /notes needs `userinfo`."""
    verifier = Verifier(issuer.issuer, issuer.server.settings.audience, clock=issuer.server.clock.now)
    # The keys as a resource service would fetch them (read here over the plain listener: Python's
    # urllib trusts no test CA); the Verifier is then offline, as it always is when verifying.
    verifier.keys = parse_jwks((await issuer.server.client.get("/.well-known/jwks.json")).json)

    class Notes(tornado.web.RequestHandler):
        @requires_token(verifier, "userinfo")
        def get(self) -> None:
            self.finish({"sub": self.token_claims.subject, "cnf": self.token_claims.get("cnf")})

    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    service = tornado.httpserver.HTTPServer(tornado.web.Application([("/notes", Notes)]),
                                            ssl_options=issuer.tls_context)
    service.add_sockets(sockets)
    try:
        yield f"https://127.0.0.1:{sockets[0].getsockname()[1]}/notes"
    finally:
        service.stop()
        verifier.close()


@pytest.mark.slow
async def test_openid_client_pushes_its_request_and_holds_dpop_bound_tokens(https_issuer):
    node = require_node("openid-client")
    require_browser()
    server = https_issuer.server
    user = await server.create_user(name="Ada Lovelace")
    app = await server.create_app(user["email"], name="Analytical Notes", redirect_uris=[REGISTERED_URI])
    common = {"issuer": https_issuer.issuer, "clientId": app["clientId"], "clientSecret": app["clientSecret"],
              "redirectUri": REGISTERED_URI, "scope": SCOPE}

    started = await issuers.rp(node, https_issuer, "start", common, script=SCRIPT)
    query = parse_qs(urlsplit(started["url"]).query)
    assert set(query) == {"client_id", "request_uri"}  # nothing of the request passes through the browser
    assert query["request_uri"][0].startswith("urn:ietf:params:oauth:request_uri:")

    callback = await issuers.browser_step(https_issuer, started["url"], user["email"], user["password"])
    landed = redirect_query(callback, REGISTERED_URI)
    assert landed["state"] == [started["state"]] and "code" in landed

    async for resource_url in notes_service(https_issuer):
        done = await issuers.rp(node, https_issuer, "finish", {**common, **started, "callbackUrl": callback,
                                                               "resourceUrl": resource_url}, script=SCRIPT)
    jkt = thumbprint(started["publicJwk"])
    for tokens in (done["tokens"], done["refreshed"]):
        assert tokens["token_type"].lower() == "dpop"
        assert unverified_claims(tokens["access_token"].removeprefix("lba_at_"))["cnf"] == {"jkt": jkt}
    assert done["userinfo"]["name"] == "Ada Lovelace"
    subject = unverified_claims(done["refreshed"]["access_token"].removeprefix("lba_at_"))["sub"]
    assert done["resource"] == {"status": 200, "body": {"sub": subject, "cnf": {"jkt": jkt}}}
    # Stolen, the token is worth nothing without the key.
    stolen = await server.client.get("/api/auth/me", bearer=done["refreshed"]["access_token"])
    assert stolen.status == 401 and stolen.headers["WWW-Authenticate"].startswith("DPoP ")


async def device_step(issuer: issuers.HttpsIssuer, url: str, email: str, password: str, user_code: str) -> str:
    """Chromium, on the user's phone: verification_uri_complete, sign in, see the code and the
    warning, Approve; the page's text afterwards."""
    async with issuers.signed_in_page(issuer, url, email, password) as page:
        code = page.get_by_label("Code", exact=True)
        assert await code.input_value() == user_code  # filled in from verification_uri_complete
        await page.get_by_role("button", name="Continue").click()
        warning = await page.locator("#device-warning").inner_text()
        assert "Continue only if you started this on a device in front of you" in warning
        assert user_code in warning
        await page.get_by_role("button", name="Approve").click()
        await page.get_by_text("You can return to your device").wait_for()
        return await page.locator("main").inner_text()


@pytest.mark.slow
async def test_openid_client_polls_the_device_grant_while_the_user_approves_in_chromium(https_issuer):
    """RFC 8628 with openid-client's initiateDeviceAuthorization and pollDeviceAuthorizationGrant
    (with a DPoP handle): it polls while the user approves on another device, then gets DPoP-bound
    tokens and reads UserInfo. The server's clock moves with real time, as polling needs."""
    node = require_node("openid-client")
    require_browser()
    server = https_issuer.server
    user = await server.create_user(name="Grace Hopper")
    app = await server.create_app(user["email"], name="Living Room Speaker", redirect_uris=[REGISTERED_URI],
                                  device=True)
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": str(https_issuer.ca)}
    document = {"issuer": https_issuer.issuer, "clientId": app["clientId"], "clientSecret": app["clientSecret"],
                "scope": "openid userinfo profile"}
    process = await asyncio.create_subprocess_exec(
        node, str(SCRIPT), "device", json.dumps(document), cwd=ROOT / "tests", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

    async def tick() -> None:
        while True:
            await asyncio.sleep(0.25)
            server.clock.advance(0.25)
    ticking = asyncio.ensure_future(tick())
    try:
        first = json.loads(await asyncio.wait_for(process.stdout.readline(), timeout=60))
        started = first.get("device")
        assert started, first
        assert started["verification_uri"] == https_issuer.issuer + "/device" and started["interval"] == 5
        text = await device_step(https_issuer, started["verification_uri_complete"], user["email"], user["password"],
                                 started["user_code"])
        assert "Living Room Speaker" in text
        out, err = await asyncio.wait_for(process.communicate(), timeout=90)
    finally:
        ticking.cancel()
        if process.returncode is None:
            process.kill()
    assert process.returncode == 0, f"{out.decode()} {err.decode()[-2000:]}"
    done = json.loads(out)
    assert done["tokens"]["token_type"].lower() == "dpop"
    claims = unverified_claims(done["tokens"]["access_token"].removeprefix("lba_at_"))
    assert claims["cnf"] == {"jkt": thumbprint(done["publicJwk"])}
    assert done["userinfo"]["name"] == "Grace Hopper"

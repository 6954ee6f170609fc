"""The official MCP Python SDK (`mcp` >= 2) against lbauth: contract 17's proof (issue 23).

- lbauth runs in development mode (LBAUTH_REGISTRATION `open`) on loopback, its clock frozen at the real
  time (the SDK and the Verifier check expiry against their own clocks). The MCP server's URL is registered
  as a resource with the real CLI (`lbauth resources add URI --scope ...`).
- The MCP server is docs/examples/mcp_server.py, the file docs/agents.md shows: the SDK's `MCPServer` over
  streamable HTTP, served by uvicorn on a loopback port in this process, its tokens checked by
  `lbauth.verify.Verifier(issuer, audience=RESOURCE)` through a `TokenVerifier`, with the small ASGI layer
  that answers a `tools/call` lacking a tool's scope with 403 `insufficient_scope` naming it.
- The client is the SDK's `OAuthClientProvider` on an httpx2 client, given only the MCP server's URL. Its
  redirect handler drives Debian's Chromium through Playwright (sign in, Approve), as tests/test_browser.py
  does; the redirect URI is a real loopback listener (as a desktop agent's), whose query the callback
  handler returns.
- Three registrations: (a) a client ID metadata document (shaped like desktop agents' ones: port-less
  loopback redirect URIs, no `refresh_token` grant type), which the SDK uses only for an `https`
  `client_metadata_url` with a path: it is served over HTTPS on loopback with a test CA (the one the
  openid-client test makes) that LBAUTH_OUTBOUND_CA_FILE names; (b) RFC 7591 dynamic registration of a
  public client; (c) the SDK's registration when the agent names no `token_endpoint_auth_method`: a
  confidential client (`client_secret_basic`).
- The run: discovery (RFC 9728, then RFC 8414), registration, authorization with PKCE and `resource`,
  `whoami` sees the user; `remember` needs one more scope: 403, the SDK authorizes again with the wider
  scope (a second consent in Chromium), the call succeeds; the access token "expires" and the SDK
  refreshes (a public client's refresh token rotates); for a public client, a retired refresh token
  brought back within 10 s gets `invalid_grant` and the SDK authorizes again; the user revokes the app
  and the MCP server refuses the token within 5 s (the Verifier polls the revocation feed every 0.5 s).
- A tool that demands a passkey sign-in (`forget_memory`, `acr_values` `phr`): the example's layer answers a
  token from a weaker sign-in 401 with the RFC 9470 challenge, and the tool runs for a passkey sign-in.
- Without `mcp` (or Playwright and Chromium) the test is skipped with the reason, except under CI=true.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import socket
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web

from lbauth.clock import FrozenClock
from lbauth.verify import Verifier
from tests.conftest import IN_CI, ROOT, TestServer, arun_cli, start_server
from tests.support import TIMEOUT_MS, require_browser, unverified_claims
from tests.test_oidc_openid_client import make_certificates

try:
    import httpx2
    import uvicorn
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
    MCP_MISSING = None
except ImportError as exc:  # reported by require_mcp()
    MCP_MISSING = f"the official MCP SDK is not importable ({exc}): pip install -e '.[test]' (mcp>=2)"

try:
    from playwright.async_api import Page
except ImportError:  # require_browser() reports it
    pass

EXAMPLE = ROOT / "docs" / "examples" / "mcp_server.py"
USER_NAME = "Grace Hopper"
CLIENT_NAME = "Moonbeam Agent"
RESOURCE_NAME = "Moonbeam notes (MCP)"
RESOURCE_SCOPES = ("chat.read", "note.write")
REVOCATION_DEADLINE = 5.0  # contract 17: cut off within 5 s of a revocation


def require_mcp() -> None:
    if MCP_MISSING is None:
        return
    if IN_CI:
        pytest.fail(f"CI=true: {MCP_MISSING}", pytrace=False)
    pytest.skip(MCP_MISSING)


def load_example() -> Any:
    """docs/examples/mcp_server.py as a module (it is documentation, not a package)."""
    spec = importlib.util.spec_from_file_location("lbauth_docs_mcp_server", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loopback_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


# ---- the MCP server -----------------------------------------------------------------------------------

class McpServer:
    """docs/examples/mcp_server.py under uvicorn on a loopback port, in this event loop."""

    def __init__(self, issuer: str) -> None:
        self.sock = loopback_socket()
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/mcp"  # the resource, as `lbauth resources add` gets it
        self.issuer = issuer
        self.verifier = Verifier(issuer, audience=self.url, poll_seconds=0.5)
        self.server: uvicorn.Server | None = None
        self.task: asyncio.Task | None = None

    @property
    def metadata_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/.well-known/oauth-protected-resource/mcp"

    async def start(self, *, start_verifier: bool = True) -> None:
        if start_verifier:
            await asyncio.to_thread(self.verifier.start)  # its first fetch is blocking I/O against lbauth here
        app = load_example().build_app(self.issuer, self.url, self.verifier)
        config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="on", log_level="warning")
        self.server = uvicorn.Server(config)
        self.task = asyncio.ensure_future(self.server.serve(sockets=[self.sock]))
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert not self.task.done(), self.task.result()
            assert time.monotonic() < deadline, "uvicorn did not start"
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        if self.server is not None and self.task is not None:
            self.server.should_exit = True
            await asyncio.wait_for(self.task, 10)
        self.sock.close()
        await asyncio.to_thread(self.verifier.close)


# ---- the client's side: its redirect listener, its metadata document, its browser ------------------------

class _CallbackHandler(tornado.web.RequestHandler):
    def initialize(self, listener: CallbackListener) -> None:
        self.listener = listener

    def get(self) -> None:
        self.listener.received.append(self.request.full_url())
        if self.listener.waiting and not self.listener.waiting.done():
            self.listener.waiting.set_result(self.request.full_url())
        self.write("<!doctype html><title>agent</title><p>You can close this window.</p>")


class CallbackListener:
    """The agent's redirect URI: a real listener on 127.0.0.1 (RFC 8252 7.3)."""

    def __init__(self) -> None:
        self.received: list[str] = []
        self.waiting: asyncio.Future[str] | None = None
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        self.redirect_uri = f"http://127.0.0.1:{sockets[0].getsockname()[1]}/callback"
        app = tornado.web.Application([(r"/callback", _CallbackHandler, {"listener": self})],
                                      log_function=lambda handler: None)  # the query holds the code
        self.server = tornado.httpserver.HTTPServer(app)
        self.server.add_sockets(sockets)

    def expect(self) -> asyncio.Future[str]:
        self.waiting = asyncio.get_running_loop().create_future()
        return self.waiting

    def stop(self) -> None:
        self.server.stop()


class _DocumentHandler(tornado.web.RequestHandler):
    def initialize(self, host: DocumentHost) -> None:
        self.host = host

    def get(self) -> None:
        self.host.requests.append(dict(self.request.headers))
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "max-age=300")
        self.write(json.dumps(self.host.document))


class DocumentHost:
    """The agent's client ID metadata document over HTTPS on loopback, its certificate from a test CA."""

    def __init__(self, directory: Path) -> None:
        self.ca, cert, key, _ = make_certificates(directory)
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(cert, key)
        sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
        self.url = f"https://127.0.0.1:{sockets[0].getsockname()[1]}/agents/moonbeam.json"
        self.document: dict[str, Any] = {}
        self.requests: list[dict[str, str]] = []
        app = tornado.web.Application([(r"/agents/moonbeam\.json", _DocumentHandler, {"host": self})],
                                      log_function=lambda handler: None)
        self.server = tornado.httpserver.HTTPServer(app, ssl_options=context)
        self.server.add_sockets(sockets)

    def stop(self) -> None:
        self.server.stop()


@dataclass
class Consent:
    """Chromium as the user: opens the authorization URL, signs in if asked, approves."""
    page: Page
    listener: CallbackListener
    email: str
    password: str
    authorization_urls: list[str] = field(default_factory=list)
    consent_texts: list[str] = field(default_factory=list)
    callback: str = ""

    async def redirect_handler(self, authorization_url: str) -> None:
        """Open the URL; sign in and approve if lbauth asks (a user who approved every scope before passes
        straight through); wait for the redirect URI to be called."""
        self.authorization_urls.append(authorization_url)
        arrived = self.listener.expect()
        await self.page.goto(authorization_url)
        asked = asyncio.ensure_future(
            self.page.get_by_role("button", name=re.compile(r"^(Sign in|Approve)$")).first.wait_for())
        await asyncio.wait({arrived, asked}, timeout=TIMEOUT_MS / 1000, return_when=asyncio.FIRST_COMPLETED)
        if not arrived.done():
            await asked
            if await self.page.get_by_role("button", name="Sign in", exact=True).count():
                await self.page.get_by_label("Email", exact=True).fill(self.email)
                await self.page.get_by_label("Password", exact=True).fill(self.password)
                await self.page.get_by_role("button", name="Sign in", exact=True).click()
            approve = self.page.get_by_role("button", name="Approve")
            await approve.wait_for()
            self.consent_texts.append(await self.page.locator("main").inner_text())
            await approve.click()
        asked.cancel()
        self.callback = await asyncio.wait_for(arrived, TIMEOUT_MS / 1000)

    async def callback_handler(self) -> AuthorizationCodeResult:
        query = parse_qs(urlsplit(self.callback).query)
        assert "error" not in query, query
        return AuthorizationCodeResult(code=query["code"][0], state=query.get("state", [None])[0],
                                       iss=query.get("iss", [None])[0])


class MemoryStorage:
    """The SDK's TokenStorage, in memory (what an agent would keep on disk)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


# ---- fixtures ------------------------------------------------------------------------------------------

@dataclass
class Rig:
    lbauth: TestServer
    mcp: McpServer
    listener: CallbackListener
    documents: DocumentHost


@pytest.fixture
async def rig(tmp_path: Path, database_url: str) -> AsyncIterator[Rig]:
    require_mcp()
    require_browser()
    documents = DocumentHost(tmp_path)
    lbauth = await start_server(tmp_path, database_url, clock=FrozenClock(time.time()), env="development",
                                environ={"LBAUTH_REGISTRATION": "open", "LBAUTH_OUTBOUND_CA_FILE": str(documents.ca)})
    mcp = McpServer(lbauth.settings.issuer)
    listener = CallbackListener()
    try:
        added = await arun_cli("resources", "add", mcp.url, "--name", RESOURCE_NAME,
                               *[arg for scope in RESOURCE_SCOPES for arg in ("--scope", scope)], "--json",
                               env={"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")})
        assert added.returncode == 0, added.stderr
        assert json.loads(added.stdout) == {"resource": mcp.url, "name": RESOURCE_NAME,
                                            "scopes": list(RESOURCE_SCOPES)}
        await mcp.start()
        yield Rig(lbauth, mcp, listener, documents)
    finally:
        await mcp.stop()
        listener.stop()
        documents.stop()
        lbauth.client.close()
        await lbauth.running.stop()


# ---- the proof -------------------------------------------------------------------------------------------

async def mcp_post(url: str, access_token: str) -> httpx2.Response:
    """An MCP `initialize` straight to the MCP server with this token (no OAuth flow around it): 200 once the
    token passes the server's check, 401 when it does not."""
    async with httpx2.AsyncClient(timeout=5) as http:
        return await http.post(url, headers={"Authorization": f"Bearer {access_token}",
                                                     "Accept": "application/json, text/event-stream",
                                                     "Content-Type": "application/json"},
                               json={"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                     "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                "clientInfo": {"name": "probe", "version": "1"}}})


def force_expiry(provider: OAuthClientProvider) -> None:
    """Make the SDK's access token look expired, as it would after `expires_in` (7200 s): its next
    request refreshes first. (The SDK keeps the expiry in its context, by its own clock.)"""
    provider.context.token_expiry_time = time.time() - 1


@pytest.mark.slow
@pytest.mark.parametrize("registration", ["metadata-document", "dynamic-public", "dynamic-confidential"])
async def test_the_mcp_sdk_discovers_registers_authorizes_steps_up_and_is_cut_off(rig, browser, registration):
    """Contract 17's proof. `dynamic-confidential` is the SDK's registration when the agent sets no
    `token_endpoint_auth_method`: RFC 7591's default, `client_secret_basic`, a confidential client."""
    lbauth, mcp, issuer = rig.lbauth, rig.mcp, rig.lbauth.settings.issuer
    public = registration != "dynamic-confidential"
    user = await lbauth.create_user(name=USER_NAME)

    # The protected-resource metadata the SDK's server publishes names lbauth's issuer byte for byte.
    async with httpx2.AsyncClient(timeout=5) as http:
        prm = await http.get(mcp.metadata_url)
        unauthenticated = await http.post(mcp.url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                          headers={"Accept": "application/json, text/event-stream"})
    assert prm.status_code == 200, prm.text
    assert prm.json()["resource"] == mcp.url and prm.json()["authorization_servers"] == [issuer], prm.text
    assert f'"authorization_servers":["{issuer}"]' in prm.text.replace(" ", "")
    assert unauthenticated.status_code == 401
    assert f'resource_metadata="{mcp.metadata_url}"' in unauthenticated.headers["www-authenticate"]

    metadata = OAuthClientMetadata(client_name=CLIENT_NAME, redirect_uris=[rig.listener.redirect_uri],
                                   grant_types=["authorization_code", "refresh_token"], response_types=["code"],
                                   token_endpoint_auth_method="none" if public else None)
    client_metadata_url = None
    if registration == "metadata-document":
        client_metadata_url = rig.documents.url
        # Shaped like the documents desktop agents publish: port-less loopback redirect URIs (the
        # listener's ephemeral port then matches), no refresh_token grant type (lbauth gives one anyway).
        rig.documents.document = {"client_id": client_metadata_url, "client_name": CLIENT_NAME,
                                  "redirect_uris": ["http://localhost/callback", "http://127.0.0.1/callback"],
                                  "grant_types": ["authorization_code"], "response_types": ["code"],
                                  "token_endpoint_auth_method": "none"}
    page = await (await browser.new_context()).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    consent = Consent(page, rig.listener, user["email"], user["password"])
    storage = MemoryStorage()
    provider = OAuthClientProvider(mcp.url, metadata, storage, redirect_handler=consent.redirect_handler,
                                   callback_handler=consent.callback_handler, client_metadata_url=client_metadata_url)
    sent: list[tuple[str, str, int]] = []

    async def record(response: httpx2.Response) -> None:
        sent.append((response.request.method, str(response.request.url).split("?")[0], response.status_code))

    async with httpx2.AsyncClient(auth=provider, timeout=30, event_hooks={"response": [record]}) as http:
        async with Client(streamable_http_client(mcp.url, http_client=http)) as client:
            # Discovery, registration, authorization with PKCE and `resource`: whoami sees the user.
            whoami = await client.call_tool("whoami", {})
            assert not whoami.is_error, whoami
            first_token = storage.tokens.access_token
            claims = unverified_claims(first_token)
            assert whoami.structured_content == {"sub": user["userId"], "appScopedUserId": claims["asu"]}
            assert claims["asu"].startswith("asu_") and claims["aud"] == mcp.url and claims["iss"] == issuer
            assert claims["scope"] == "chat.read" and storage.tokens.refresh_token
            (first_url,) = consent.authorization_urls
            asked = parse_qs(urlsplit(first_url).query)
            assert first_url.startswith(issuer + "/oauth/")
            assert asked["resource"] == [mcp.url] and asked["code_challenge_method"] == ["S256"]
            assert asked["scope"] == ["chat.read"] and asked["redirect_uri"] == [rig.listener.redirect_uri]
            shown = consent.consent_texts
            assert len(shown) == 1 and (RESOURCE_NAME in shown[0] or mcp.url in shown[0]), shown
            client_id = storage.client_info.client_id
            assert asked["client_id"] == [client_id]
            registered = [url for method, url, _ in sent if method == "POST" and url == issuer + "/oauth/register"]
            if registration == "metadata-document":
                assert client_id == rig.documents.url and not registered
                assert rig.documents.requests, "lbauth never fetched the metadata document"
                assert "application/json" in rig.documents.requests[0].get("Accept", "")
            else:
                assert registered == [issuer + "/oauth/register"]
                assert storage.client_info.token_endpoint_auth_method == ("none" if public else "client_secret_basic")
                assert (storage.client_info.client_secret is None) == public
            discovery = [url for method, url, _ in sent if method == "GET"]
            assert discovery[:2] == [mcp.metadata_url, issuer + "/.well-known/oauth-authorization-server"], sent

            # remember needs note.write too: 403 insufficient_scope, the SDK authorizes again, the call succeeds.
            remembered = await client.call_tool("remember", {"note": "buy milk"})
            assert not remembered.is_error, remembered
            assert remembered.structured_content == {"remembered": "buy milk", "sub": user["userId"]}
            assert ("POST", mcp.url, 403) in sent, sent
            assert len(consent.authorization_urls) == 2 and len(consent.consent_texts) == 2
            wider = parse_qs(urlsplit(consent.authorization_urls[1]).query)
            assert set(wider["scope"][0].split()) == {"chat.read", "note.write"}, wider
            assert wider["resource"] == [mcp.url] and wider["client_id"] == [client_id]
            stepped_up = storage.tokens
            assert stepped_up.access_token != first_token
            stepped = unverified_claims(stepped_up.access_token)
            assert set(stepped["scope"].split()) == {"chat.read", "note.write"} and stepped["aud"] == mcp.url
            assert stepped["asu"] == claims["asu"]

            # The token expires: the SDK refreshes (with `resource`); a public client's refresh token rotates.
            force_expiry(provider)
            again = await client.call_tool("whoami", {})
            assert again.structured_content == whoami.structured_content
            refreshed = storage.tokens
            assert refreshed.access_token != stepped_up.access_token
            assert unverified_claims(refreshed.access_token)["aud"] == mcp.url
            assert (refreshed.refresh_token != stepped_up.refresh_token) == public
            assert len(consent.authorization_urls) == 2

            if public:
                # Two refreshes racing: the retired refresh token, within 10 s of its rotation, gets
                # invalid_grant; the SDK starts a new authorization (the user approved every scope: no
                # consent page) and the call succeeds.
                storage.tokens = provider.context.current_tokens = refreshed.model_copy(
                    update={"refresh_token": stepped_up.refresh_token})
                force_expiry(provider)
                before = len(sent)
                after_race = await client.call_tool("whoami", {})
                assert after_race.structured_content == whoami.structured_content
                assert ("POST", issuer + "/oauth/token", 400) in sent[before:], sent[before:]
                assert len(consent.authorization_urls) == 3 and len(consent.consent_texts) == 2
                # It asks again for the metadata's scopes_supported only (not a step-up); lbauth, whose
                # user approved them, redirects at once.
                assert parse_qs(urlsplit(consent.authorization_urls[2]).query)["scope"] == ["chat.read"]
            last_token = storage.tokens.access_token
            if registration == "metadata-document":  # served with max-age=300: fetched once for every step
                assert len(rig.documents.requests) == 1, rig.documents.requests

    # The user revokes the app: within 5 s the MCP server refuses its tokens (401, and the challenge).
    assert (await mcp_post(mcp.url, last_token)).status_code == 200
    user_token = await lbauth.login(user["email"], user["password"])
    revoked = await lbauth.client.delete(f"/api/auth/authorizations/{quote(client_id, safe='')}", bearer=user_token)
    assert revoked.status == 200, revoked.text
    deadline = time.monotonic() + REVOCATION_DEADLINE
    while (answer := await mcp_post(mcp.url, last_token)).status_code != 401:
        assert time.monotonic() < deadline, f"still {answer.status_code} {REVOCATION_DEADLINE} s after the revocation"
        await asyncio.sleep(0.1)
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]
    assert f'resource_metadata="{mcp.metadata_url}"' in answer.headers["www-authenticate"]
    assert (await mcp_post(mcp.url, first_token)).status_code == 401

    # lbauth.verify's own document for this resource says what the SDK's server published.
    from lbauth.verify import resource_metadata
    ours = resource_metadata(mcp.url, issuer, scopes=["chat.read"])
    assert {k: prm.json()[k] for k in ours} == ours


async def test_an_unreachable_lbauth_is_a_server_error_not_a_new_authorization():
    """The token verifier raises on `server.unavailable` (here: the Verifier never reached lbauth, so it
    has no keys) instead of returning None: the MCP server answers 500, not the 401 that would send every
    connected agent's user back to the consent page."""
    require_mcp()
    mcp = McpServer("http://127.0.0.1:9")  # nothing listens there
    await mcp.start(start_verifier=False)
    try:
        answer = await mcp_post(mcp.url, "lba_at_eyJ.eyJ.sig")
    finally:
        await mcp.stop()
    assert answer.status_code == 500, (answer.status_code, answer.headers)
    assert "www-authenticate" not in answer.headers


async def test_forgetting_agent_memory_asks_for_a_passkey_sign_in(server):
    """The example's `forget_memory` demands a passkey sign-in (RFC 9470): a `tools/call` with a token from a
    password or TOTP sign-in gets 401 `insufficient_user_authentication` with `acr_values="phr"` and the
    resource metadata (what an MCP client sees), while other tools keep working with that token; a token
    that lacks the tool's scope still gets the 403 scope challenge; a passkey sign-in's token runs the tool."""
    require_mcp()
    from tests.test_verify import PASSKEY, PASSWORD, TOTP, claims_of, sign

    mcp = McpServer(server.url)
    mcp.verifier = Verifier(server.url, audience=mcp.url, clock=server.clock.now, poll_seconds=0.5)
    _, real = await claims_of(server)

    def token(sign_in: dict, scope: str = "chat.read agent_memory") -> str:
        return sign(server, {**real, **sign_in, "aud": mcp.url, "scope": scope, "auth_time": int(server.clock.now())})

    async def call(access_token: str, tool: str) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=5) as http:
            return await http.post(mcp.url, headers={"Authorization": f"Bearer {access_token}",
                                                     "Accept": "application/json, text/event-stream"},
                                   json={"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                         "params": {"name": tool, "arguments": {}}})

    await mcp.start()
    try:
        description = "This resource needs a stronger sign-in than the access token's."
        for weaker in (PASSWORD, TOTP):
            refused = await call(token(weaker), "forget_memory")
            assert refused.status_code == 401, refused.text
            assert refused.headers["www-authenticate"] == (
                f'Bearer error="insufficient_user_authentication", error_description="{description}", '
                f'acr_values="phr", resource_metadata="{mcp.metadata_url}"')
            assert refused.json() == {"error": "insufficient_user_authentication", "error_description": description}
        no_scope = await call(token(PASSKEY, scope="chat.read"), "forget_memory")
        assert no_scope.status_code == 403
        assert no_scope.headers["www-authenticate"] == (
            f'Bearer error="insufficient_scope", scope="chat.read agent_memory", '
            f'resource_metadata="{mcp.metadata_url}"')

        for sign_in, tool, expected in ((PASSWORD, "whoami", {"sub": real["sub"], "appScopedUserId": real["asu"]}),
                                        (PASSKEY, "forget_memory", {"forgotten": "agent memory", "sub": real["sub"]})):
            headers = {"Authorization": f"Bearer {token(sign_in)}"}
            async with httpx2.AsyncClient(timeout=5, headers=headers) as http:
                async with Client(streamable_http_client(mcp.url, http_client=http)) as client:
                    result = await client.call_tool(tool, {})
            assert not result.is_error and result.structured_content == expected, result
    finally:
        await mcp.stop()

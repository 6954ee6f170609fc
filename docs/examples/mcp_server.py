"""An MCP server (the official `mcp` SDK, mcp>=2, streamable HTTP) whose tools are protected by lbauth
(docs/agents.md). tests/test_mcp_sdk.py runs this very file against a real lbauth.

    pip install 'mcp>=2' lbauth
    lbauth resources add https://mcp.example.com/mcp --scope chat.read --scope note.write --scope agent_memory
    LBAUTH_ISSUER=https://auth.example.com MCP_RESOURCE=https://mcp.example.com/mcp python mcp_server.py

- `LbauthTokenVerifier` is the SDK's `TokenVerifier` over `lbauth.verify.Verifier`, which checks tokens
  offline (signature, issuer, `aud` = this resource, expiry, the revocation check-list).
- `AuthSettings` names lbauth's issuer verbatim; the SDK then serves the RFC 9728 protected-resource
  metadata at /.well-known/oauth-protected-resource/mcp (`authorization_servers: [issuer]`) and answers a
  request without a valid token with 401 and `WWW-Authenticate: Bearer ... resource_metadata="..."`.
- `ToolScopeChallenge` answers a `tools/call` whose token lacks the tool's scopes with 403
  `insufficient_scope` naming them: the SDK checks scopes per endpoint and its own 403 names no scope, and
  MCP clients step up (authorize again with the wider scope) only on a challenge that names it. A tool that
  demands a stronger sign-in (`forget_memory`: a passkey, `acr` `phr`) gets 401
  `insufficient_user_authentication` with `acr_values` (RFC 9470 3) for a token whose sign-in falls short.
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from pydantic import AnyHttpUrl

from lbauth.verify import INSUFFICIENT_USER_AUTHENTICATION, TokenError, Verifier

# The scopes every request needs (checked by the SDK), and what each tool needs (checked below).
REQUIRED_SCOPES = ["chat.read"]
TOOL_SCOPES = {"whoami": ("chat.read",), "remember": ("chat.read", "note.write"),
               "forget_memory": ("chat.read", "agent_memory")}
# The sign-ins a tool accepts (RFC 9470 `acr_values`): forgetting every memory takes a passkey.
TOOL_ACR_VALUES = {"forget_memory": ("phr",)}
MAX_INSPECTED_BODY = 1 << 20  # a larger JSON-RPC body is passed through uninspected (the tool checks again)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class LbauthTokenVerifier:
    """The SDK's `TokenVerifier` over lbauth.verify. None (the SDK answers 401 and the client authorizes
    again) only for a token lbauth refuses: invalid, expired, revoked, for another resource. An lbauth that
    cannot be reached (503 `server.unavailable`) raises: the client gets a 5xx, not a reason to re-authorize."""

    def __init__(self, verifier: Verifier, resource: str) -> None:
        self.verifier = verifier
        self.resource = resource

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            claims = self.verifier.verify(token)  # memory only: no I/O on the request path
        except TokenError as error:
            if error.status in (401, 403):
                return None
            raise
        return AccessToken(token=token, client_id=claims["client_id"], scopes=claims["scope"].split(),
                           expires_at=claims["exp"], resource=self.resource, subject=claims["sub"], claims=claims)


class ToolScopeChallenge:
    """ASGI layer in front of the SDK's app: a `tools/call` of a tool whose scopes the token lacks gets 403
    `WWW-Authenticate: Bearer error="insufficient_scope", scope="...", resource_metadata="..."` (RFC 6750
    3.1, RFC 9728 5.1); one of a tool that demands a stronger sign-in than the token's gets 401
    `Bearer error="insufficient_user_authentication", error_description="...", acr_values="phr",
    resource_metadata="..."` (RFC 9470 3). A missing or invalid token is left to the SDK (its 401)."""

    def __init__(self, app: ASGIApp, token_verifier: LbauthTokenVerifier, tool_scopes: Mapping[str, Sequence[str]],
                 resource_metadata_url: str, path: str,
                 tool_acr_values: Mapping[str, Sequence[str]] | None = None) -> None:
        self.app, self.token_verifier, self.tool_scopes = app, token_verifier, tool_scopes
        self.resource_metadata_url, self.path = resource_metadata_url, path
        self.tool_acr_values = tool_acr_values or {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        chunks, size, more = [], 0, True
        while more and size <= MAX_INSPECTED_BODY:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            more = message.get("more_body", False)
        body = b"".join(chunks)
        tools = () if more else tools_called(body)
        needed = self.needs(self.tool_scopes, tools)
        acr_values = self.needs(self.tool_acr_values, tools)
        if needed or acr_values:
            try:  # memory only, like the SDK's own check: the scopes first, then the sign-in
                self.token_verifier.verifier.verify(bearer(scope), needed, acr_values=acr_values)
            except TokenError as error:
                if error.sub_code in ("oauth2.scope.insufficient", INSUFFICIENT_USER_AUTHENTICATION):
                    await self.refuse(send, error, needed)
                    return
                # no token, a bad one, lbauth unreachable: the SDK answers, as for any request
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": more}
        await self.app(scope, replay, send)

    @staticmethod
    def needs(per_tool: Mapping[str, Sequence[str]], tools: Sequence[str]) -> tuple[str, ...]:
        """What the tools called need (scopes, or accepted ACR values), in order, without repeats."""
        needed: list[str] = []
        for name in tools:
            needed += [value for value in per_tool.get(name, ()) if value not in needed]
        return tuple(needed)

    async def refuse(self, send: Send, error: TokenError, needed: Sequence[str]) -> None:
        """403 `insufficient_scope` naming every scope the tools need, or 401
        `insufficient_user_authentication` naming the ACR values they accept; the challenge is
        lbauth.verify's (`TokenError.challenge_for`), the body RFC 6750's error and description."""
        if error.sub_code == INSUFFICIENT_USER_AUTHENTICATION:
            rfc_error, description = "insufficient_user_authentication", error.message
        else:
            rfc_error, description = "insufficient_scope", "This tool needs the scopes " + " ".join(needed)
        challenge = error.challenge_for(needed, self.resource_metadata_url)
        body = json.dumps({"error": rfc_error, "error_description": description}).encode()
        await send({"type": "http.response.start", "status": error.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"www-authenticate", challenge.encode())]})
        await send({"type": "http.response.body", "body": body})


def tools_called(body: bytes) -> tuple[str, ...]:
    """The names of the tools a JSON-RPC body (one message or a batch) calls."""
    try:
        document = json.loads(body)
    except ValueError:
        return ()
    names: list[str] = []
    for message in document if isinstance(document, list) else [document]:
        if isinstance(message, dict) and message.get("method") == "tools/call":
            params = message.get("params")
            name = params.get("name") if isinstance(params, dict) else None
            if isinstance(name, str):
                names.append(name)
    return tuple(names)


def bearer(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == b"authorization":
            kind, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if kind.lower() == "bearer" else ""
    return ""


def granted(*scopes: str, acr_values: Sequence[str] = ()) -> AccessToken:
    """The caller's token, which must carry `scopes` and, with `acr_values`, come from one of those
    sign-ins (the tool checks again: defence in depth)."""
    access = get_access_token()
    if access is None or not set(scopes) <= set(access.scopes):
        raise PermissionError("this tool needs the scopes " + " ".join(scopes))
    if acr_values and (access.claims or {}).get("acr") not in acr_values:
        raise PermissionError("this tool needs a sign-in with " + " or ".join(acr_values))
    return access


def build_app(issuer: str, resource: str, verifier: Verifier, *, host: str = "127.0.0.1") -> ASGIApp:
    """The ASGI application: the SDK's streamable HTTP app at the resource's path, behind the scope layer.
    `issuer` is LBAUTH_ISSUER verbatim; `resource` the URI given to `lbauth resources add`; `verifier` a
    started `Verifier(issuer, audience=resource)`."""
    token_verifier = LbauthTokenVerifier(verifier, resource)
    server = MCPServer("lbauth-notes", token_verifier=token_verifier, auth=AuthSettings(
        issuer_url=issuer, resource_server_url=resource, required_scopes=REQUIRED_SCOPES,
        validate_token_resource=False))  # the Verifier checks `aud` itself

    @server.tool()
    def whoami() -> dict[str, str]:
        """Who the token was issued for: lbauth's user id and the id this app sees."""
        access = granted(*TOOL_SCOPES["whoami"])
        return {"sub": access.subject or "", "appScopedUserId": (access.claims or {}).get("asu", "")}

    @server.tool()
    def remember(note: str) -> dict[str, str]:
        """Keep a note (needs note.write on top of chat.read)."""
        access = granted(*TOOL_SCOPES["remember"])
        return {"remembered": note, "sub": access.subject or ""}

    @server.tool()
    def forget_memory() -> dict[str, str]:
        """Forget everything the agent remembered about the user (needs agent_memory, and a passkey sign-in)."""
        access = granted(*TOOL_SCOPES["forget_memory"], acr_values=TOOL_ACR_VALUES["forget_memory"])
        return {"forgotten": "agent memory", "sub": access.subject or ""}

    path = urlsplit(resource).path or "/"
    app = server.streamable_http_app(streamable_http_path=path, host=host)
    metadata_url = str(build_resource_metadata_url(AnyHttpUrl(resource)))
    return ToolScopeChallenge(app, token_verifier, TOOL_SCOPES, metadata_url, path, TOOL_ACR_VALUES)


if __name__ == "__main__":
    import uvicorn

    lbauth_issuer, mcp_resource = os.environ["LBAUTH_ISSUER"], os.environ["MCP_RESOURCE"]
    lbauth_verifier = Verifier(lbauth_issuer, audience=mcp_resource, max_staleness=30)
    lbauth_verifier.start()  # fetches lbauth's keys and revocations now, then every 2 s
    try:
        uvicorn.run(build_app(lbauth_issuer, mcp_resource, lbauth_verifier, host=os.environ.get("HOST", "127.0.0.1")),
                    host=os.environ.get("HOST", "127.0.0.1"), port=int(os.environ.get("PORT", "8000")))
    finally:
        lbauth_verifier.close()

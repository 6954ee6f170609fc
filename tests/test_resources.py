"""Resource indicators (RFC 8707) and resource services (RFC 9728), contract 17: `lbauth resources`,
`resource` at /oauth/ and /oauth/token, `aud` per resource, invalid_target, scopes dropped outside a
resource's list, narrowing on refresh, the consent page, and lbauth.verify's side (audiences,
the protected-resource metadata document and the challenges that MCP clients step up on)."""

from __future__ import annotations

import asyncio
import json
from urllib.parse import quote

import pytest
import tornado.httpserver
import tornado.netutil
import tornado.web

from lbauth.core import resources
from lbauth.verify import (
    TokenError,
    Verifier,
    requires_token,
    resource_metadata,
    resource_metadata_route,
    resource_metadata_url,
)
from tests.client import Client
from tests.conftest import arun_cli
from tests.flow_helpers import PageSession, full_setup, oauth_url, redirect_query
from tests.support import unverified_claims

MCP = "https://mcp.example.com"  # registered without a path: MCP clients send it with the slash
NOTES = "https://notes.example/mcp"
VOICE = "https://voice.example/api"


async def register(server, uri: str, name: str | None = None, scopes: list[str] | None = None) -> dict:
    return await resources.add_resource(server.db, server.clock, uri, name=name, scopes=scopes)


async def authorize(server, setup, page_session: PageSession | None = None, *, scope: str | None = "userinfo",
                    resource: list[str] = (), approve: bool = True, state: str = "st-res") -> tuple[dict, object]:
    """The front channel as a browser: sign in, the consent page (returned), Approve; the redirect's
    query."""
    params: list[tuple[str, str]] = [("client_id", setup.client_id), ("redirect_uri", setup.redirect_uri),
                                     ("response_type", "code"), ("state", state)]
    if scope is not None:
        params.append(("scope", scope))
    params += [("resource", r) for r in resource]
    browser = page_session or PageSession(server)
    page = await browser.open_logged_in(oauth_url(params), setup.user["email"], setup.user["password"])
    consent = page
    if page.status == 200 and page.consent_form() is not None and approve:
        page = await approve_consent(browser, page)
    assert page.status in (302, 303), (page.status, page.text[:300])
    return redirect_query(page.location, setup.redirect_uri), consent


async def approve_consent(browser: PageSession, page) -> object:
    """Press Approve as a browser does: every hidden input sent, a repeated name (`resource`) as
    many times as it appears (PageSession.decide keeps one value per name)."""
    form = page.consent_form()
    pairs = [(i["name"], i.get("value", "")) for i in form.inputs
             if i.get("type", "text").lower() == "hidden" and i.get("name")]
    action = browser.absolute(form.action, page.url)
    return await browser.follow(await browser.request("POST", action, form=[*pairs, ("decision", "approve")]))


async def token(server, setup, **form) -> object:
    fields = {"client_id": setup.client_id, "client_secret": setup.client_secret, **form}
    return await server.client.post("/oauth/token", form={k: v for k, v in fields.items() if v is not None})


async def code_exchange(server, setup, code: str, resource: list[str] | None = None) -> object:
    return await token(server, setup, grant_type="authorization_code", code=code, redirect_uri=setup.redirect_uri,
                       resource=resource)


# ---- lbauth resources add | list | remove --------------------------------------------------------------

async def test_the_resources_commands(server, tmp_path):
    env = {"LBAUTH_DATABASE_URL": server.settings.database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}

    async def cli(*args: str, ok: bool = True):
        result = await arun_cli("resources", *args, env=env)
        assert (result.returncode == 0) == ok, (result.stdout, result.stderr)
        return json.loads(result.stdout) if ok and "--json" in args else result

    added = await cli("add", "HTTPS://MCP.Example.com:443", "--name", "Notes MCP", "--scope", "chat.read",
                      "--scope", "memory.read", "--json")
    assert added == {"resource": "HTTPS://MCP.Example.com:443", "name": "Notes MCP",
                     "scopes": ["memory.read", "chat.read"]}
    # The same resource however it is spelled: scheme and host case, default port, the empty path.
    for spelling in ("https://mcp.example.com", "https://mcp.example.com/", "https://MCP.EXAMPLE.COM:443/"):
        refused = await cli("add", spelling, "--json", ok=False)
        assert "already registered" in refused.stderr and refused.stdout == ""
    for bad in ("https://mcp.example.com/#frag", "/relative/path", "not a uri"):
        refused = await cli("add", bad, ok=False)
        assert "absolute URI without a fragment" in refused.stderr
    assert (await cli("add", "https://mcp.example.com", "--scope", "no.such", ok=False)).returncode == 1
    every = await cli("add", "https://voice.example:8443/api", "--json")
    assert every == {"resource": "https://voice.example:8443/api", "name": "voice.example", "scopes": None}
    assert await cli("list", "--json") == [added, every]
    assert await cli("remove", "https://mcp.example.com/", "--json") == added
    assert await cli("list", "--json") == [every]
    assert "No resource" in (await cli("remove", "https://mcp.example.com", ok=False)).stderr
    text = (await cli("list")).stdout
    assert "https://voice.example:8443/api" in text


# ---- aud per resource, and Verifier(audience=...) ---------------------------------------------------------

async def test_a_token_for_a_resource_carries_it_as_aud_and_only_its_verifier_accepts_it(server):
    await register(server, NOTES, "Team notes", ["userinfo", "chat.read"])
    await register(server, VOICE, "Voice service")
    s = await full_setup(server)
    # Sent in another spelling than registered: matched after normalisation, aud as registered.
    query, consent = await authorize(server, s, scope="userinfo chat.read", resource=["HTTPS://Notes.Example:443/mcp"])
    assert "Team notes" in consent.text and NOTES in consent.text  # the consent page names the resource
    assert "Voice service" not in consent.text
    r = await code_exchange(server, s, query["code"][0], resource=["https://notes.example/mcp"])
    assert r.status == 200, r.text
    access = r.json["access_token"]
    assert unverified_claims(access)["aud"] == NOTES and r.json["scope"] == "userinfo chat.read"

    for_notes = Verifier(server.url, "https://NOTES.example:443/mcp", clock=server.clock.now)
    for_voice = Verifier(server.url, VOICE, clock=server.clock.now)
    for_lbauth = Verifier(server.url, server.settings.audience, clock=server.clock.now)
    for v in (for_notes, for_voice, for_lbauth):
        await v.arefresh()
    try:
        assert for_notes.verify(access, ["chat.read"])["sub"] == unverified_claims(access)["sub"]
        for refusing in (for_voice, for_lbauth):
            with pytest.raises(TokenError) as info:
                refusing.verify(access)
            assert (info.value.sub_code, info.value.status) == ("oauth2.token.invalid", 401)
            assert "for another audience" in info.value.message
    finally:
        for v in (for_notes, for_voice, for_lbauth):
            v.close()
    # lbauth's own bearer endpoints take only tokens for lbauth itself.
    refused = await server.client.get("/api/auth/me", bearer=access)
    body = refused.assert_error(401, "oauth2.token.invalid")
    assert body["message"] == (f"The access token is for another audience: {server.settings.audience} is not "
                               "among its aud.")
    userinfo = await server.client.get("/oauth/userinfo", bearer=access)
    assert userinfo.status == 401 and 'error="invalid_token"' in userinfo.headers["WWW-Authenticate"]


async def test_without_resource_at_the_token_endpoint_aud_lists_every_resource_and_refresh_narrows(server):
    await register(server, NOTES)
    await register(server, VOICE)
    await register(server, MCP)
    s = await full_setup(server)
    query, consent = await authorize(server, s, scope="userinfo", resource=[NOTES, VOICE])
    assert NOTES in consent.text and VOICE in consent.text and MCP not in consent.text
    r = await code_exchange(server, s, query["code"][0])
    assert r.status == 200, r.text
    assert unverified_claims(r.json["access_token"])["aud"] == [NOTES, VOICE]  # a list, not LBAUTH_AUDIENCE
    refresh_token = r.json["refresh_token"]

    async def refreshed(**form):
        return await token(server, s, grant_type="refresh_token", refresh_token=refresh_token, **form)

    narrowed = await refreshed(resource=VOICE + "/")  # RFC 3986 6.2.2 does not drop a path's slash...
    assert narrowed.status == 400 and narrowed.json["error"] == "invalid_target"
    narrowed = await refreshed(resource="HTTPS://voice.example/api")  # ...but does lowercase the host
    assert narrowed.status == 200 and unverified_claims(narrowed.json["access_token"])["aud"] == VOICE
    both = await refreshed(resource=[NOTES, VOICE])
    assert unverified_claims(both.json["access_token"])["aud"] == [NOTES, VOICE]
    assert unverified_claims((await refreshed()).json["access_token"])["aud"] == [NOTES, VOICE]
    # Registered but not granted; unknown; not a resource indicator at all.
    for outside in (MCP, "https://unknown.example/", "https://notes.example/mcp#x"):
        refused = await refreshed(resource=outside)
        assert (refused.status, refused.json["error"]) == (400, "invalid_target"), outside


async def test_without_any_resource_aud_stays_lbauth_audience(server):
    await register(server, NOTES)
    s = await full_setup(server)
    query, _ = await authorize(server, s, scope="userinfo")
    r = await code_exchange(server, s, query["code"][0])
    assert unverified_claims(r.json["access_token"])["aud"] == server.settings.audience
    assert (await server.client.get("/api/auth/me", bearer=r.json["access_token"])).status == 200
    # A resource named only at the token endpoint is not one the code was issued for.
    query, _ = await authorize(server, s, scope="userinfo")
    refused = await code_exchange(server, s, query["code"][0], resource=[NOTES])
    assert (refused.status, refused.json["error"]) == (400, "invalid_target")
    refreshed = await token(server, s, grant_type="refresh_token", refresh_token=r.json["refresh_token"],
                            resource=NOTES)
    assert (refreshed.status, refreshed.json["error"]) == (400, "invalid_target")


async def test_the_slash_some_clients_add_names_the_same_resource(server):
    await register(server, MCP)  # no path
    s = await full_setup(server)
    query, _ = await authorize(server, s, resource=[MCP + "/"])  # as URL.href sends it
    r = await code_exchange(server, s, query["code"][0], resource=[MCP + "/"])
    assert r.status == 200, r.text
    assert unverified_claims(r.json["access_token"])["aud"] == MCP  # as registered
    verifier = Verifier(server.url, MCP + "/", clock=server.clock.now)
    await verifier.arefresh()
    try:
        assert verifier.verify(r.json["access_token"])
    finally:
        verifier.close()


# ---- invalid_target -------------------------------------------------------------------------------------

async def test_an_unknown_resource_is_invalid_target_at_both_endpoints(server):
    await register(server, NOTES)
    await register(server, VOICE)
    s = await full_setup(server)
    for bad in ("https://unknown.example/mcp", "https://notes.example/mcp#fragment", "notes.example/mcp"):
        query, _ = await authorize(server, s, resource=[NOTES, bad], state="st-bad")
        assert query["error"] == ["invalid_target"] and query["state"] == ["st-bad"], (bad, query)
        assert "code" not in query
    # At the token endpoint: a resource the code was not issued for is refused before the code is
    # used up; the code still works for its own resource.
    query, _ = await authorize(server, s, resource=[NOTES])
    refused = await code_exchange(server, s, query["code"][0], resource=[VOICE])
    assert (refused.status, refused.json["error"]) == (400, "invalid_target")
    refused = await code_exchange(server, s, query["code"][0], resource=[NOTES, VOICE])
    assert (refused.status, refused.json["error"]) == (400, "invalid_target")
    refused = await code_exchange(server, s, query["code"][0], resource=["not a uri"])
    assert (refused.status, refused.json["error"]) == (400, "invalid_target")
    ok = await code_exchange(server, s, query["code"][0], resource=[NOTES])
    assert ok.status == 200 and unverified_claims(ok.json["access_token"])["aud"] == NOTES


# ---- scopes within a resource's list --------------------------------------------------------------------

async def test_scopes_outside_a_resource_list_are_dropped_and_the_response_says_what_was_granted(server):
    await register(server, NOTES, scopes=["chat.read", "memory.read"])
    await register(server, VOICE, scopes=["chat.read", "voice"])
    s = await full_setup(server)
    query, consent = await authorize(server, s, scope="userinfo chat.read voice", resource=[NOTES])
    assert "chat.read" in consent.text and "userinfo" not in consent.text and "voice" not in consent.text
    r = await code_exchange(server, s, query["code"][0])
    assert r.status == 200 and r.json["scope"] == "chat.read"
    assert unverified_claims(r.json["access_token"])["scope"] == "chat.read"
    # Two resources: only what both allow.
    query, _ = await authorize(server, s, scope="chat.read memory.read voice", resource=[NOTES, VOICE])
    assert (await code_exchange(server, s, query["code"][0])).json["scope"] == "chat.read"
    # Nothing left: invalid_scope, at the redirect URI.
    query, _ = await authorize(server, s, scope="userinfo", resource=[NOTES])
    assert query["error"] == ["invalid_scope"]


async def test_a_request_without_scope_gets_the_app_scopes_within_the_resources_never_openid(server):
    await register(server, NOTES, scopes=["openid", "chat.read", "memory.read", "voice"])
    await register(server, MCP)  # every scope
    s = await full_setup(server, allowed_scopes=["openid", "profile", "chat.read", "memory.read"])
    query, _ = await authorize(server, s, scope=None, resource=[NOTES])
    r = await code_exchange(server, s, query["code"][0])
    assert r.json["scope"] == "memory.read chat.read" and "id_token" not in r.json
    query, _ = await authorize(server, s, scope=None, resource=[MCP])
    assert (await code_exchange(server, s, query["code"][0])).json["scope"] == "profile memory.read chat.read"
    # Without scope and without resource: the app's scopes, as before (openid included).
    s2 = await full_setup(server, allowed_scopes=["profile", "chat.read"])
    query, _ = await authorize(server, s2, scope=None)
    assert (await code_exchange(server, s2, query["code"][0])).json["scope"] == "profile chat.read"


async def test_a_grant_holding_a_resource_is_asked_again_for_another(server):
    await register(server, NOTES)
    await register(server, VOICE)
    s = await full_setup(server)
    browser = PageSession(server)
    await authorize(server, s, browser, resource=[NOTES])
    query, page = await authorize(server, s, browser, resource=[NOTES], approve=False)  # covered: no page
    assert "code" in query and page.status in (302, 303)
    _, page = await authorize(server, s, browser, resource=[VOICE])  # not covered: the consent page
    assert page.consent_form() is not None and VOICE in page.text
    query, page = await authorize(server, s, browser, resource=[VOICE, NOTES], approve=False)  # both held now
    r = await code_exchange(server, s, query["code"][0])
    assert unverified_claims(r.json["access_token"])["aud"] == [VOICE, NOTES]


# ---- revocation, whatever the audience --------------------------------------------------------------------

async def test_revoking_the_grant_cuts_off_a_resource_token_in_lbauth_verify(server):
    await register(server, NOTES)
    s = await full_setup(server)
    query, _ = await authorize(server, s, resource=[NOTES])
    access = (await code_exchange(server, s, query["code"][0])).json["access_token"]
    verifier = Verifier(server.url, NOTES, clock=server.clock.now)
    await verifier.arefresh()
    try:
        assert verifier.verify(access)
        revoked = await server.client.delete(f"/api/auth/authorizations/{quote(s.client_id, safe='')}",
                                             bearer=s.token)
        assert revoked.status == 200
        await verifier.arefresh()  # the check-list's next refresh
        with pytest.raises(TokenError) as info:
            verifier.verify(access)
        assert info.value.sub_code == "oauth2.token.revoked"
    finally:
        verifier.close()


async def test_rfc7009_and_rfc7662_know_a_resource_token(server):
    await register(server, NOTES)
    s = await full_setup(server)
    query, _ = await authorize(server, s, resource=[NOTES])
    access = (await code_exchange(server, s, query["code"][0])).json["access_token"]
    active = await server.client.post("/oauth/introspect", form={"token": access, "client_id": s.client_id,
                                                                 "client_secret": s.client_secret})
    assert active.json["active"] is True and active.json["aud"] == [NOTES]  # no resource at the token endpoint
    revoked = await server.client.post("/oauth/revoke", form={"token": access, "client_id": s.client_id,
                                                               "client_secret": s.client_secret})
    assert revoked.status == 200
    after = await server.client.post("/oauth/introspect", form={"token": access, "client_id": s.client_id,
                                                                "client_secret": s.client_secret})
    assert after.json == {"active": False}


# ---- RFC 9728: the protected-resource metadata and the challenges ---------------------------------------

def test_the_protected_resource_metadata_document():
    issuer = "https://auth.example.com/tenant"
    assert resource_metadata(NOTES, issuer) == {"resource": NOTES, "authorization_servers": [issuer],
                                                "bearer_methods_supported": ["header"]}
    assert resource_metadata(MCP, issuer, ["chat.read", "voice"])["scopes_supported"] == ["chat.read", "voice"]
    assert resource_metadata_url(NOTES) == "https://notes.example/.well-known/oauth-protected-resource/mcp"
    assert resource_metadata_url(MCP) == "https://mcp.example.com/.well-known/oauth-protected-resource"
    assert resource_metadata_url(MCP + "/") == "https://mcp.example.com/.well-known/oauth-protected-resource"
    with pytest.raises(ValueError):
        resource_metadata("https://x.example/#f", issuer)


async def test_a_tornado_resource_service_publishes_its_metadata_and_challenges_for_step_up(server):
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    base = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
    resource = base + "/mcp"
    await register(server, resource, "Local MCP", ["userinfo", "chat.read"])
    metadata_at = resource_metadata_url(resource)
    verifier = Verifier(server.url, resource, clock=server.clock.now)
    await verifier.arefresh()

    class Tool(tornado.web.RequestHandler):
        @requires_token(verifier, "userinfo", "chat.read", resource_metadata=metadata_at)
        def get(self) -> None:
            self.write({"sub": self.token_claims["sub"]})

    app = tornado.web.Application([resource_metadata_route(resource, server.settings.issuer, ["userinfo", "chat.read"],
                                                           handler_base=tornado.web.RequestHandler),
                                   ("/mcp", Tool)])
    service = tornado.httpserver.HTTPServer(app)
    service.add_sockets(sockets)
    client = Client(base)
    try:
        document = await client.get("/.well-known/oauth-protected-resource/mcp")
        assert document.status == 200 and document.json == {
            "resource": resource, "authorization_servers": [server.settings.issuer],
            "bearer_methods_supported": ["header"], "scopes_supported": ["userinfo", "chat.read"]}

        missing = await client.get("/mcp")
        assert missing.status == 401
        assert missing.headers["WWW-Authenticate"] == (
            f'Bearer resource_metadata="{metadata_at}", scope="userinfo chat.read"')
        invalid = await client.get("/mcp", bearer="lba_at_not.a.token")
        assert invalid.status == 401 and invalid.headers["WWW-Authenticate"] == (
            f'Bearer error="invalid_token", resource_metadata="{metadata_at}", scope="userinfo chat.read"')

        s = await full_setup(server)
        query, _ = await authorize(server, s, scope="userinfo", resource=[resource])
        narrow = (await code_exchange(server, s, query["code"][0])).json["access_token"]
        insufficient = await client.get("/mcp", bearer=narrow)
        assert insufficient.status == 403 and insufficient.headers["WWW-Authenticate"] == (
            f'Bearer error="insufficient_scope", scope="userinfo chat.read", resource_metadata="{metadata_at}"')
        # A token for lbauth itself, not for this resource: invalid_token.
        query, _ = await authorize(server, s, scope="userinfo chat.read")
        other = (await code_exchange(server, s, query["code"][0])).json["access_token"]
        assert (await client.get("/mcp", bearer=other)).status == 401
        # Step up: ask again with the scope the challenge named.
        query, _ = await authorize(server, s, scope="userinfo chat.read", resource=[resource])
        wide = (await code_exchange(server, s, query["code"][0], resource=[resource])).json["access_token"]
        ok = await client.get("/mcp", bearer=wide)
        assert ok.status == 200 and ok.json == {"sub": unverified_claims(wide)["sub"]}
    finally:
        client.close()
        service.stop()
        verifier.close()
        await asyncio.sleep(0)


async def test_the_server_side_authorize_api_takes_resources_too(server):
    await register(server, NOTES, scopes=["chat.read"])
    s = await full_setup(server)

    async def authorize_api(**extra):
        return await server.client.post("/api/oauth/authorize/external", bearer=s.token, json={
            "clientId": s.client_id, "redirectUri": s.redirect_uri, "scope": ["userinfo", "chat.read"], **extra})

    r = await authorize_api(resource=["https://NOTES.example/mcp"])
    assert r.status == 200, r.text
    exchanged = await code_exchange(server, s, r.data["code"])
    assert exchanged.json["scope"] == "chat.read"
    assert unverified_claims(exchanged.json["access_token"])["aud"] == [NOTES]
    (await authorize_api(resource=["https://unknown.example/"])).assert_error(400, "oauth2.target.invalid")
    (await authorize_api(resource=NOTES)).assert_error(400, "request.validation_failed")  # not an array
    (await authorize_api(scope=["userinfo"], resource=[NOTES])).assert_error(400, "oauth2.scope.invalid")

"""Dynamic client registration (RFC 7591) with RFC 7592 read and delete (contract 17): a client
registers itself at POST /oauth/register, gets a client id (and a secret when confidential), and
completes the code flow; LBAUTH_REGISTRATION open, token or off; the registration access token
reads and deletes the registration, and a deletion stops the app's tokens."""

from __future__ import annotations

import json
import time
from datetime import datetime

import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata

from lbauth.clock import FrozenClock
from tests.conftest import arun_cli, start_server
from tests.flow_helpers import PageSession, front_params, oauth_url, pkce_pair, redirect_query
from tests.revocation_helpers import basic

MCP_CALLBACK = "http://localhost:33418/callback"
# What the MCP Python SDK sends: its request model, dumped as mcp.client.auth.utils does.
MCP_METADATA = OAuthClientMetadata(
    redirect_uris=[MCP_CALLBACK], token_endpoint_auth_method="none", client_name="An MCP client",
    grant_types=["authorization_code", "refresh_token"], response_types=["code"],
).model_dump(by_alias=True, mode="json", exclude_none=True)


@pytest.fixture
async def make_server(tmp_path, database_url):
    started = []

    async def make(**settings):
        srv = await start_server(tmp_path, database_url, **settings)
        started.append(srv)
        return srv
    yield make
    for srv in started:
        srv.client.close()
        await srv.running.stop()


@pytest.fixture
async def open_server(make_server):
    return await make_server(registration="open")


async def register(server, document, **kwargs):
    return await server.client.post("/oauth/register", json=document, **kwargs)


def _timestamp(text: str) -> float:
    """An ISO 8601 time as the CLI prints it (2030-03-17T17:46:40Z)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def assert_rfc7591_error(response, status: int, error: str) -> None:
    assert response.status == status, response.text
    assert set(response.json) == {"error", "error_description"} and response.json["error"] == error, response.text
    assert response.json["error_description"]


# ---- registering ---------------------------------------------------------------------------------------

async def test_a_public_client_registers_and_the_answer_echoes_every_field(open_server):
    r = await register(open_server, {**MCP_METADATA, "scope": "userinfo chat.read"})
    assert r.status == 201, r.text
    info = r.json
    assert info["client_id"].startswith("cid_") and info["client_id_issued_at"] == int(open_server.clock.now())
    assert {k: info[k] for k in ("redirect_uris", "grant_types", "response_types", "token_endpoint_auth_method",
                                 "client_name", "application_type")} == {
        "redirect_uris": [MCP_CALLBACK], "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"], "token_endpoint_auth_method": "none", "client_name": "An MCP client",
        "application_type": "native"}  # the SDK's default application_type
    assert info["scope"] == "userinfo chat.read"
    assert info["registration_access_token"].startswith("lba_rat_")
    assert info["registration_client_uri"] == f"{open_server.url}/oauth/register/{info['client_id']}"
    assert "client_secret" not in info and "client_secret_expires_at" not in info  # public: no secret
    assert r.headers["Cache-Control"] == "no-store" and r.headers["Pragma"] == "no-cache"
    assert r.headers["Access-Control-Allow-Origin"] == "*"  # browser clients register too (contract 11)
    parsed = OAuthClientInformationFull.model_validate(info)  # what the MCP Python SDK keeps
    assert parsed.client_id == info["client_id"] and [str(u) for u in parsed.redirect_uris] == [MCP_CALLBACK]
    assert parsed.token_endpoint_auth_method == "none" and parsed.client_secret is None


async def test_a_confidential_client_gets_a_secret_that_never_expires(open_server):
    document = {"redirect_uris": ["https://agent.example/cb"], "client_name": "Agent",
                "client_uri": "https://agent.example", "logo_uri": "https://agent.example/logo.png"}
    r = await register(open_server, document)
    assert r.status == 201, r.text
    info = r.json
    assert info["token_endpoint_auth_method"] == "client_secret_basic"  # RFC 7591 2: the default
    assert info["client_secret"].startswith("lba_cs_") and info["client_secret_expires_at"] == 0
    assert info["grant_types"] == ["authorization_code", "refresh_token"] and info["response_types"] == ["code"]
    assert info["application_type"] == "web" and info["client_name"] == "Agent"
    assert info["client_uri"] == "https://agent.example" and info["logo_uri"] == "https://agent.example/logo.png"
    parsed = OAuthClientInformationFull.model_validate(info)
    assert parsed.client_secret == info["client_secret"] and parsed.client_secret_expires_at == 0
    post = await register(open_server, {**document, "token_endpoint_auth_method": "client_secret_post"})
    assert post.status == 201 and post.json["client_secret"] and post.json["token_endpoint_auth_method"] == \
        "client_secret_post"
    unnamed = await register(open_server, {"redirect_uris": ["https://agent.example/cb"]})
    assert unnamed.status == 201 and unnamed.json["client_name"]  # a clear default name


async def _approve(server, user, client_id, redirect_uri, scope=None):
    """The user's browser: sign in, approve; the code and the token response's PKCE verifier."""
    verifier, challenge = pkce_pair()
    params = front_params(client_id, redirect_uri, scope=scope, code_challenge=challenge,
                          code_challenge_method="S256")
    browser = PageSession(server)
    consent = await browser.open_logged_in(oauth_url(params), user["email"], user["password"])
    landing = await browser.decide(consent, "approve")
    assert landing.status in (302, 303), landing.text[:300]
    query = redirect_query(landing.location, redirect_uri)
    return query["code"][0], verifier


@pytest.mark.parametrize("client_id_in_form", [False, True], ids=["basic", "basic-and-client_id"])
async def test_a_registered_confidential_client_completes_the_code_flow(open_server, client_id_in_form):
    """client_secret_basic, alone and with client_id in the form beside it, as the MCP Python SDK sends."""
    redirect_uri = "https://agent.example/cb"
    info = (await register(open_server, {"redirect_uris": [redirect_uri], "scope": "userinfo"})).json
    user = await open_server.create_user()
    code, verifier = await _approve(open_server, user, info["client_id"], redirect_uri)
    form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri, "code_verifier": verifier}
    if client_id_in_form:
        form["client_id"] = info["client_id"]
    r = await open_server.client.post("/oauth/token", form=form, headers=basic(info["client_id"],
                                                                               info["client_secret"]))
    assert r.status == 200, r.text
    assert r.json["scope"] == "userinfo" and r.json["refresh_token"].startswith("lba_rt_")
    me = await open_server.client.get("/api/auth/me", bearer=r.json["access_token"])
    assert me.status == 200 and me.data["userId"] == user["userId"]
    renewed = await open_server.client.post("/oauth/token", headers=basic(info["client_id"], info["client_secret"]),
                                            form={"grant_type": "refresh_token",
                                                  "refresh_token": r.json["refresh_token"]})
    assert renewed.status == 200, renewed.text


# ---- what is refused ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("uri", [
    "javascript:alert(1)", "data:text/html,hi", "file:///etc/passwd", "https://agent.example/cb#frag",
    "http://localhost:3000/cb#x", "ftp://agent.example/cb", "myapp:/cb", "http://agent.example/cb",
    "com.example.app://host/cb", "", "/relative",
    "https://agent\uff0fexample/cb",  # a host that changes under NFKC: was a 500
    "https://@agent.example/cb", "https://user@agent.example/cb",  # user-info, even empty
])
async def test_a_bad_redirect_uri_is_invalid_redirect_uri(open_server, uri):
    r = await register(open_server, {"redirect_uris": ["https://agent.example/ok", uri]})
    assert_rfc7591_error(r, 400, "invalid_redirect_uri")


@pytest.mark.parametrize(("uri", "shown", "not_shown"), [
    ("https://\u0430pple.example/cb", "xn--pple-43d.example", "\u0430pple"),  # a Cyrillic a
    ("com.evil.app:/cb", "com.evil.app:", None),  # a private-use URI has no host: its scheme is shown
    ("https://agent.example:8443/cb", "agent.example:8443", None),
])
async def test_the_consent_page_names_the_host_the_browser_will_reach(open_server, uri, shown, not_shown):
    """A self-registered app's "Its codes go to": the punycode host, so that a look-alike name
    cannot pass for another; the scheme of a native app's URI (it showed an empty host)."""
    info = (await register(open_server, {"redirect_uris": [uri], "token_endpoint_auth_method": "none"})).json
    user = await open_server.create_user()
    verifier, challenge = pkce_pair()
    params = front_params(info["client_id"], uri, code_challenge=challenge, code_challenge_method="S256")
    browser = PageSession(open_server)
    await browser.open_logged_in(oauth_url(params), user["email"], user["password"])
    page = await browser.get(oauth_url(params))  # signed in (a non-ASCII host is not followed from sign-in)
    assert page.status == 200 and page.consent_form() is not None, page.text[:300]
    assert f"Its codes go to {shown}" in page.text
    if not_shown:
        assert not_shown not in page.text


@pytest.mark.parametrize("redirect_uris", [None, [], "https://agent.example/cb", [42]])
async def test_redirect_uris_must_be_a_non_empty_list(open_server, redirect_uris):
    document = {} if redirect_uris is None else {"redirect_uris": redirect_uris}
    assert_rfc7591_error(await register(open_server, document), 400, "invalid_redirect_uri")


@pytest.mark.parametrize("uri", ["com.example.agent:/oauth/cb", "http://localhost/cb", "http://127.0.0.1/cb",
                                 "http://[::1]:8080/cb", "https://agent.example/cb?x=1"])
async def test_private_use_schemes_and_loopback_without_a_port_are_accepted(open_server, uri):
    r = await register(open_server, {"redirect_uris": [uri], "token_endpoint_auth_method": "none"})
    assert r.status == 201, r.text
    assert r.json["redirect_uris"] == [uri]


@pytest.mark.parametrize("document", [
    {"token_endpoint_auth_method": "private_key_jwt"},
    {"token_endpoint_auth_method": "client_secret_jwt"},
    {"sector_identifier_uri": "https://agent.example/sector.json"},
    {"subject_type": "public"},
    {"application_type": "desktop"},
    {"grant_types": ["client_credentials"]},
    {"grant_types": ["authorization_code", "implicit"]},
    {"response_types": ["token"]},
    {"client_name": ""},
    {"client_name": "x" * 201},
    {"client_uri": "javascript:alert(1)"},
    {"logo_uri": "https://agent.example/logo.png#x"},
    {"scope": ["userinfo"]},
], ids=lambda d: next(iter(d.items()))[0] + "=" + str(next(iter(d.values())))[:20])
async def test_bad_metadata_is_invalid_client_metadata(open_server, document):
    r = await register(open_server, {"redirect_uris": ["https://agent.example/cb"], **document})
    assert_rfc7591_error(r, 400, "invalid_client_metadata")


@pytest.mark.parametrize("body", [b"[]", b'"text"', b"not json", b"", b"\xff\xfe"])
async def test_a_body_that_is_not_a_json_object_is_invalid_client_metadata(open_server, body):
    r = await open_server.client.post("/oauth/register", body=body, headers={"Content-Type": "application/json"})
    assert_rfc7591_error(r, 400, "invalid_client_metadata")


async def test_unknown_scope_values_and_unknown_fields_are_ignored(open_server):
    r = await register(open_server, {"redirect_uris": ["https://agent.example/cb"], "scope": "userinfo mcp:tools",
                                     "contacts": ["ops@agent.example"], "software_id": "x", "subject_type": None})
    assert r.status == 201, r.text
    assert r.json["scope"] == "userinfo" and "contacts" not in r.json


# ---- LBAUTH_REGISTRATION ---------------------------------------------------------------------------------

async def test_token_mode_needs_a_live_initial_access_token(make_server, tmp_path, database_url):
    """`lbauth registration-tokens create` makes the token; it is reusable until it expires (24 h)."""
    srv = await make_server(registration="token", clock=FrozenClock(time.time()))
    document = {"redirect_uris": ["https://agent.example/cb"]}
    for headers in ({}, {"Authorization": "Bearer lba_iat_" + "x" * 43}, {"Authorization": "Basic eDp5"}):
        r = await register(srv, document, headers=headers)
        assert_rfc7591_error(r, 401, "invalid_token")
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}
    made = await arun_cli("registration-tokens", "create", "--json", env=env)
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    assert set(created) == {"token", "expiresAt"} and created["token"].startswith("lba_iat_")
    assert abs(_timestamp(created["expiresAt"]) - time.time() - 86_400) < 120  # 24 h after creation
    for _ in range(2):  # reusable until it expires
        r = await register(srv, document, bearer=created["token"])
        assert r.status == 201, r.text
    srv.clock.advance(86_400 + 60)
    assert_rfc7591_error(await register(srv, document, bearer=created["token"]), 401, "invalid_token")
    short = json.loads((await arun_cli("registration-tokens", "create", "--expires-in", "60", "--json",
                                       env=env)).stdout)
    assert 0 < _timestamp(short["expiresAt"]) - time.time() <= 61


async def test_off_mode_answers_404_and_advertises_nothing(make_server):
    srv = await make_server(registration="off")
    r = await register(srv, {"redirect_uris": ["https://agent.example/cb"]})
    assert r.status == 404
    meta = (await srv.client.get("/.well-known/oauth-authorization-server")).json
    assert "registration_endpoint" not in meta


async def test_the_metadata_advertises_the_endpoint_and_development_is_open(make_server):
    srv = await make_server(env="development")
    meta = (await srv.client.get("/.well-known/oauth-authorization-server")).json
    assert meta["registration_endpoint"] == f"{srv.url}/oauth/register"
    assert (await register(srv, {"redirect_uris": ["https://agent.example/cb"]})).status == 201
    production = await make_server()
    assert_rfc7591_error(await register(production, {"redirect_uris": ["https://agent.example/cb"]}),
                         401, "invalid_token")


async def test_registration_is_rate_limited_per_source_address(make_server):
    srv = await make_server(registration="open", rate_limits="register-address=3/60")
    document = {"redirect_uris": ["https://agent.example/cb"]}
    for _ in range(3):
        assert (await register(srv, document)).status == 201
    r = await register(srv, document)
    # RFC 7591 3.2.2's error object (the OpenAPI document's RegistrationRateLimited), not the envelope.
    assert_rfc7591_error(r, 429, "invalid_request")
    assert 1 <= int(r.headers["Retry-After"]) <= 60
    srv.clock.advance(60)
    assert (await register(srv, document)).status == 201


# ---- RFC 7592 -----------------------------------------------------------------------------------------------

async def test_the_registration_access_token_reads_and_deletes_the_registration(open_server):
    srv = open_server
    info = (await register(srv, {"redirect_uris": ["https://agent.example/cb"], "scope": "userinfo"})).json
    other = (await register(srv, {**MCP_METADATA})).json
    uri, token = info["registration_client_uri"], info["registration_access_token"]

    read = await srv.client.get(uri, bearer=token)
    assert read.status == 200, read.text
    expected = {k: v for k, v in info.items()
                if k not in ("client_secret", "client_secret_expires_at", "registration_access_token")}
    assert read.json == expected  # every registered field; the secret is not shown again
    OAuthClientInformationFull.model_validate(read.json)
    for wrong in ({"bearer": other["registration_access_token"]}, {"bearer": "lba_rat_" + "x" * 43},
                  {"bearer": info["client_secret"]}, {}):
        for method in ("GET", "DELETE"):
            r = await srv.client.request(method, uri, **wrong)
            assert_rfc7591_error(r, 401, "invalid_token")
    put = await srv.client.request("PUT", uri, json_body=info, bearer=token)
    assert put.status == 405 and "PUT" not in put.headers["Allow"] and "GET" in put.headers["Allow"]

    # A user's tokens of the app, then the deletion.
    user = await srv.create_user()
    code, verifier = await _approve(srv, user, info["client_id"], "https://agent.example/cb")
    tokens = (await srv.client.post("/oauth/token", headers=basic(info["client_id"], info["client_secret"]), form={
        "grant_type": "authorization_code", "code": code, "redirect_uri": "https://agent.example/cb",
        "code_verifier": verifier})).json
    assert (await srv.client.get("/api/auth/me", bearer=tokens["access_token"])).status == 200

    gone = await srv.client.request("DELETE", uri, bearer=token)
    assert gone.status == 204 and gone.body == b""
    assert_rfc7591_error(await srv.client.get(uri, bearer=token), 401, "invalid_token")
    assert (await srv.client.get("/api/auth/me", bearer=tokens["access_token"])).status == 401
    refreshed = await srv.client.post("/oauth/token", headers=basic(info["client_id"], info["client_secret"]),
                                      form={"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]})
    assert refreshed.status == 401 and refreshed.json["error"] == "invalid_client"
    assert (await srv.client.get(other["registration_client_uri"],
                                 bearer=other["registration_access_token"])).status == 200  # the other stays


# ---- scope: a default, never a ceiling -------------------------------------------------------------------

async def test_the_registered_scope_is_the_default_and_not_a_ceiling(open_server):
    srv = open_server
    redirect_uri = "https://agent.example/cb"
    info = (await register(srv, {"redirect_uris": [redirect_uri], "scope": "chat.read userinfo"})).json
    user = await srv.create_user()
    auth = basic(info["client_id"], info["client_secret"])

    async def granted(scope):
        code, verifier = await _approve(srv, user, info["client_id"], redirect_uri, scope=scope)
        r = await srv.client.post("/oauth/token", headers=auth, form={
            "grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
            "code_verifier": verifier})
        assert r.status == 200, r.text
        return r.json["scope"].split()

    assert sorted(await granted(None)) == ["chat.read", "userinfo"]
    # Step-up: more scopes than registered, without registering again.
    assert sorted(await granted("userinfo chat.read chat.write plaza.read")) == \
        ["chat.read", "chat.write", "plaza.read", "userinfo"]

"""Hostile input (contract section 3): whatever a client sends, the answer is a 4xx in the error
envelope with HTTP status = `code` (the RFC endpoints of section 11 answer their own
`{"error", "error_description"}`; pages answer HTML), never a 5xx, never a traceback, never a hang;
and the server is healthy afterwards (every test ends with a complete login -> authorize -> code
exchange -> /api/auth/me flow).

Most requests go through tests.client with a generous timeout (HANG_GUARD: a hang raises, and fails
the test; it is no timing check, and an argon2 login under load stays far inside it). Requests a
well-behaved client cannot send (chunked bodies, raw bytes in the request line or the headers, `..`
in the path) go over a raw socket, under the same guard.

Where Tornado refuses a request at the HTTP layer, before any handler runs, lbauth cannot shape
the answer; what Tornado 6.6 does is pinned loosely ("a 4xx, or the connection closed without an
answer"):
- headers (the request line included) over 64 KB: the connection is closed, no answer;
- a NUL byte in the request line or a header value: a bare `400 Bad Request`, no body.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any
from urllib.parse import quote, unquote, urlencode

import jwt
import pytest
from jwt import PyJWKSet
from tornado.httputil import HTTPHeaders

from tests.client import Response
from tests.flow_helpers import (
    PageSession,
    Setup,
    exchange,
    front_params,
    full_setup,
    oauth_url,
    redirect_query,
    tokens_for,
)

HANG_GUARD = 30.0  # seconds, per request: detects a hang; not a timing assertion
MB = 1024 * 1024

JSON_ENDPOINTS = ("/api/auth/login", "/api/oauth/authorize/external")
ENVELOPE_FORM_ENDPOINTS = ("/api/oauth/token/code", "/api/oauth/token/refresh")
RFC_ENDPOINTS = ("/oauth/token", "/oauth/revoke", "/oauth/introspect")
FORM_ENDPOINTS = ENVELOPE_FORM_ENDPOINTS + RFC_ENDPOINTS
GET_ENDPOINTS = ("/api/auth/me", "/api/oauth/revocations")
POST_ENDPOINTS = JSON_ENDPOINTS + FORM_ENDPOINTS
PAGE_PREFIXES = ("/login", "/logout", "/oauth/", "/account", "/console/")
RFC_ERROR = {"request.validation_failed": "invalid_request", "request.too_large": "invalid_request",
             "oauth2.client.secret_mismatch": "invalid_client"}
FORM = "application/x-www-form-urlencoded"


# ---- what every refusal looks like ------------------------------------------------------------------

def kind_of(path: str) -> str:
    path = path.split("?")[0]
    if path in RFC_ENDPOINTS:
        return "rfc"
    if path.startswith(PAGE_PREFIXES) or path == "/oauth":
        return "page"
    return "envelope"


def assert_refused(r: Response | None, path: str, status: int | None = None, sub_code: str | None = None,
                   message: str | None = None) -> None:
    """A 4xx (the given one, if any) in the shape `path` answers with; `message` is a substring of
    the envelope's message (or of the RFC error_description)."""
    assert r is not None, f"{path}: the connection was closed without an answer"
    assert 400 <= r.status < 500, (path, r.status, r.text[:300])
    if status is not None:
        assert r.status == status, (path, r.status, r.text[:300])
    assert "Traceback" not in r.text and 'File "' not in r.text, (path, r.text[:300])
    kind = kind_of(path)
    if kind == "page":
        assert r.headers.get("Content-Type", "").startswith("text/html"), (path, r.headers)
        return
    assert r.headers.get("Content-Type", "").startswith("application/json"), (path, r.headers, r.text[:300])
    document = r.json
    if kind == "rfc":
        assert set(document) == {"error", "error_description"}, (path, document)
        if sub_code is not None:
            assert document["error"] == RFC_ERROR[sub_code], (path, document)
        if message is not None:
            assert message in document["error_description"], (path, document)
        return
    assert set(document) == {"code", "message", "subCode"}, (path, document)
    assert document["code"] == r.status, (path, document)
    assert isinstance(document["message"], str) and document["message"], (path, document)
    if sub_code is not None:
        assert document["subCode"] == sub_code, (path, document)
    if message is not None:
        assert message in document["message"], (path, document)


def assert_http_layer_refusal(r: Response | None, what: str) -> None:
    """Tornado refused before any handler ran: a 4xx (typically a bare 400 or a 431), or the
    connection closed without an answer. Never a 5xx; the hang guard rules out a hang."""
    if r is not None:
        assert 400 <= r.status < 500, (what, r.status, r.text[:300])
        assert "Traceback" not in r.text, (what, r.text[:300])


async def assert_healthy(server: Any) -> None:
    """GET /healthz, then a complete flow: login -> authorize -> code exchange -> /api/auth/me."""
    health = await server.client.get("/healthz", timeout=HANG_GUARD)
    assert health.status == 200, health.text
    setup = await full_setup(server)
    tokens = await tokens_for(server, setup)
    me = await server.client.get("/api/auth/me", bearer=tokens["accessToken"], timeout=HANG_GUARD)
    assert me.status == 200, me.text
    assert me.data["email"] == setup.user["email"]


# ---- sending --------------------------------------------------------------------------------------------

async def send(server: Any, method: str, path: str, body: bytes | str | None = None,
               content_type: str | None = None, bearer: str | None = None,
               headers: dict[str, str] | None = None) -> Response:
    """One request through tests.client, with the hang guard."""
    headers = dict(headers or {})
    if content_type is not None:
        headers["Content-Type"] = content_type
    return await server.client.request(method, path, body=body, headers=headers, bearer=bearer, timeout=HANG_GUARD)


def bearer_for(path: str, setup: Setup) -> str | None:
    """authorize/external reads its body only for a logged-in user: give it one."""
    return setup.token if path == "/api/oauth/authorize/external" else None


async def raw(server: Any, request: bytes) -> Response | None:
    """Send `request` as is over a socket; the answer, or None when the server closed the
    connection without one. The request is written while the answer is read (the server may
    answer, and close, before it has read everything)."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)

    async def exchange() -> Response | None:
        reader, writer = await asyncio.open_connection(host, int(port))

        async def write() -> None:
            try:
                writer.write(request)
                await writer.drain()
            except (ConnectionError, OSError):
                pass  # the server stopped reading: its answer (or its silence) is what counts

        sending = asyncio.ensure_future(write())
        try:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError) as exc:
                partial = getattr(exc, "partial", b"")
                assert not partial, f"a truncated answer: {partial[:200]!r}"
                return None
            status_line, _, header_text = head.decode("latin-1").partition("\r\n")
            headers = HTTPHeaders.parse(header_text)
            if "Content-Length" in headers:
                body = await reader.readexactly(int(headers["Content-Length"]))
            else:
                body = await _read_to_close(reader)
            return Response(int(status_line.split()[1]), headers, body)
        finally:
            sending.cancel()
            writer.close()

    return await asyncio.wait_for(exchange(), HANG_GUARD)


async def _read_to_close(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.read()
    except ConnectionError:
        return b""


def http_request(method: str, path: str, headers: dict[str, str | bytes] | None = None,
                 body: bytes = b"", chunk_size: int | None = None) -> bytes:
    """An HTTP/1.1 request as bytes: Content-Length framing, or chunked when `chunk_size` is given."""
    lines = [f"{method} {path} HTTP/1.1".encode("latin-1"), b"Host: 127.0.0.1", b"Connection: close"]
    for name, value in (headers or {}).items():
        lines.append(name.encode("latin-1") + b": " + (value if isinstance(value, bytes) else value.encode("latin-1")))
    if chunk_size is None:
        if body or method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: %d" % len(body))
        payload = body
    else:
        lines.append(b"Transfer-Encoding: chunked")
        payload = b"".join(b"%x\r\n%b\r\n" % (len(piece), piece)
                           for piece in (body[i:i + chunk_size] for i in range(0, len(body), chunk_size)))
        payload += b"0\r\n\r\n"
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload


@pytest.fixture
async def setup(server: Any) -> Setup:
    return await full_setup(server)


# ---- bodies -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("framing", [None, 64 * 1024, 2 * MB], ids=["content-length", "chunked-64k", "chunked-one"])
async def test_a_2mb_body_is_413(server, setup, framing):
    """Over max_body_bytes (1 MB): 413 request.too_large, however the body is framed."""
    body = b"x" * (2 * MB)
    for path in POST_ENDPOINTS + GET_ENDPOINTS:
        method = "GET" if path in GET_ENDPOINTS else "POST"
        content_type = "application/json" if path in JSON_ENDPOINTS else FORM
        headers: dict[str, str | bytes] = {"Content-Type": content_type}
        if bearer_for(path, setup):
            headers["Authorization"] = f"Bearer {setup.token}"
        r = await raw(server, http_request(method, path, headers, body, chunk_size=framing))
        assert_refused(r, path, 413, "request.too_large")
    # a body within the limit is read whatever its framing
    login = json.dumps({"email": setup.user["email"], "password": setup.user["password"]}).encode()
    r = await raw(server, http_request("POST", "/api/auth/login", {"Content-Type": "application/json"}, login,
                                       chunk_size=framing and 7))  # 7-byte chunks when chunked
    assert r is not None and r.status == 200, r and r.text
    await assert_healthy(server)


async def test_invalid_utf8_is_400(server, setup):
    json_bodies = [b'{"email": "\xff\xfe@example.com", "password": "x"}', b'{"clientId": "\xc3\x28"}']
    for path in JSON_ENDPOINTS:
        for body in json_bodies:
            r = await send(server, "POST", path, body, "application/json", bearer_for(path, setup))
            assert_refused(r, path, 400, "request.validation_failed", "UTF-8")
    form_bodies = [b"grant_type=\xff\xfe&code=x", b"grant_type=%ff%fe&code=x", b"code%c3%28=x"]
    for path in FORM_ENDPOINTS:
        for body in form_bodies:
            r = await send(server, "POST", path, body, FORM)
            assert_refused(r, path, 400, "request.validation_failed", "UTF-8")
    r = await send(server, "GET", "/api/oauth/revocations?since=%ff%fe")
    assert_refused(r, "/api/oauth/revocations", 400, "request.validation_failed")
    await assert_healthy(server)


MULTIPART = "multipart/form-data; boundary=XyZ"
MULTIPART_BODY = (b'--XyZ\r\nContent-Disposition: form-data; name="grant_type"\r\n\r\n'
                  b"authorization_code\r\n--XyZ--\r\n")


@pytest.mark.parametrize("content_type", ["text/plain", "application/json", MULTIPART, None],
                         ids=["text-plain", "json", "multipart", "none"])
async def test_wrong_content_types(server, setup, content_type):
    """Form endpoints read only application/x-www-form-urlencoded: anything else has no fields,
    so `Field required` (contract 3). JSON endpoints read the body as JSON whatever its declared
    type: a form or a multipart body there is invalid JSON (400); JSON under another declared
    type is read (and here refused for its content: wrong password, unknown app)."""
    multipart = MULTIPART_BODY if content_type == MULTIPART else None
    form = (f"grant_type=authorization_code&code=x&redirect_uri=https%3A%2F%2Fapp.example%2Fcallback"
            f"&client_id={setup.client_id}&client_secret=nope&refresh_token=x&token=x").encode()

    async def post(path: str, body: bytes) -> Response | None:
        headers: dict[str, str | bytes] = {"Content-Type": content_type} if content_type else {}
        if bearer_for(path, setup):
            headers["Authorization"] = f"Bearer {setup.token}"
        # over a socket: tests.client (Tornado's) would add a form Content-Type to a POST without one
        return await raw(server, http_request("POST", path, headers, body))

    for path in FORM_ENDPOINTS:
        for body in (multipart or form, json.dumps({"grant_type": "authorization_code"}).encode()):
            assert_refused(await post(path, body), path, 400, "request.validation_failed", "Field required")
    document = json.dumps({"email": setup.user["email"], "password": "wrong", "clientId": "nope",
                           "redirectUri": "https://app.example/callback", "scope": ["userinfo"]}).encode()
    for path in JSON_ENDPOINTS:
        for body in (multipart or b"email=a%40example.com&password=x", document):
            r = await post(path, body)
            if body is document:
                assert_refused(r, path, 401 if path == "/api/auth/login" else 404)
            else:
                assert_refused(r, path, 400, "request.validation_failed", "JSON")
    await assert_healthy(server)


# ---- JSON documents -----------------------------------------------------------------------------------

DEPTH = 100_000
BAD_DOCUMENTS = {
    "list": b"[]",
    "number": b"1",
    "null": b"null",
    "string": b'"email"',
    "true": b"true",
    "huge-number": b"1e999999",
    "huge-integer": b"9" * 5000,  # over Python's int-from-string digit limit
    "nested-lists": b"[" * DEPTH,
    "nested-lists-closed": b"[" * DEPTH + b"]" * DEPTH,
    "nested-objects": b'{"a":' * DEPTH + b"1" + b"}" * DEPTH,
    "truncated": b'{"email": "a@example.com", "password": ',
    "empty": b"",
    "bom": b'\xef\xbb\xbf{"email": "a@example.com", "password": "x"}',
}


@pytest.mark.parametrize("name", list(BAD_DOCUMENTS))
async def test_json_that_is_not_an_object_is_400(server, setup, name):
    for path in JSON_ENDPOINTS:
        r = await send(server, "POST", path, BAD_DOCUMENTS[name], "application/json", bearer_for(path, setup))
        assert_refused(r, path, 400, "request.validation_failed")
    await assert_healthy(server)


async def test_odd_field_values_are_4xx(server, setup):
    """Fields of the wrong type, out-of-range numbers, NaN, duplicate keys: a 4xx envelope (the
    JSON parser keeps the last of duplicate keys, so those are refused for their values)."""
    app = {"clientId": setup.client_id, "redirectUri": setup.redirect_uri, "scope": ["userinfo"]}
    login_bodies = [
        '{"email": 1e999999, "password": "x"}',
        '{"email": NaN, "password": Infinity}',
        '{"email": ["a@example.com"], "password": {"$ne": null}}',
        f'{{"email": "{setup.user["email"]}", "password": "wrong", "password": "wrong too"}}',
        '{"email": "", "password": ""}',
    ]
    for body in login_bodies:
        r = await send(server, "POST", "/api/auth/login", body, "application/json")
        assert_refused(r, "/api/auth/login")
    authorize_bodies = [
        {**app, "clientId": 1e308},
        {**app, "clientId": ["x"]},
        {**app, "redirectUri": {"a": 1}},
        {**app, "scope": 1e308},
        {**app, "scope": [1]},
        {**app, "scope": [["userinfo"]]},
        {**app, "scope": {"userinfo": True}},
        {**app, "scope": []},
        {**app, "state": 12},
        {**app, "state": "s" * 100_000},
        {**app, "codeChallenge": ["x"], "codeChallengeMethod": "S256"},
        {**app, "codeChallenge": "x" * 43, "codeChallengeMethod": 256},
    ]
    for document in authorize_bodies:
        r = await send(server, "POST", "/api/oauth/authorize/external", json.dumps(document), "application/json",
                       setup.token)
        assert_refused(r, "/api/oauth/authorize/external")
    body = json.dumps(app)[:-1] + ', "clientId": "nope"}'  # duplicate key, the last one unknown
    r = await send(server, "POST", "/api/oauth/authorize/external", body, "application/json", setup.token)
    assert_refused(r, "/api/oauth/authorize/external", 404, "oauth2.application.not_found")
    await assert_healthy(server)


# ---- headers and query strings --------------------------------------------------------------------------

async def test_huge_headers(server, setup):
    """Over Tornado's 64 KB of headers (a 64 KB value, a 1 MB bearer token): refused by Tornado
    itself (it closes the connection); just under it, lbauth answers as usual."""
    for name, value in (("X-Junk", "a" * (64 * 1024)), ("Authorization", "Bearer " + "a" * MB)):
        for method, path in (("GET", "/api/auth/me"), ("POST", "/api/auth/login"), ("POST", "/oauth/token")):
            r = await raw(server, http_request(method, path, {name: value, "Content-Type": FORM}))
            assert_http_layer_refusal(r, f"{method} {path} with a huge {name}")
    r = await send(server, "GET", "/api/auth/me", headers={"X-Junk": "a" * (60 * 1024)})
    assert_refused(r, "/api/auth/me", 401, "oauth2.token.missing")
    r = await send(server, "GET", "/api/auth/me", bearer="a" * (60 * 1024))
    assert_refused(r, "/api/auth/me", 401, "oauth2.token.invalid")
    r = await send(server, "POST", "/api/oauth/authorize/external", "{}", "application/json", bearer="a" * (60 * 1024))
    assert_refused(r, "/api/oauth/authorize/external", 401, "oauth2.token.invalid")
    await assert_healthy(server)


async def test_huge_query_strings(server, setup):
    """A 100 KB query string is over Tornado's header limit (closed, no answer); 50 KB reaches
    lbauth, which refuses what it reads and ignores what it does not."""
    huge = "a" * (100 * 1024)
    for method, path in (("GET", "/api/oauth/revocations"), ("GET", "/api/auth/me"), ("POST", "/oauth/token"),
                         ("POST", "/api/oauth/token/code")):
        r = await raw(server, http_request(method, f"{path}?since={huge}&junk={huge}"))
        assert_http_layer_refusal(r, f"{method} {path} with a 100 KB query")
    big = "a" * (50 * 1024)
    r = await send(server, "GET", f"/api/oauth/revocations?since={big}")
    assert_refused(r, "/api/oauth/revocations", 400, "request.validation_failed")
    r = await send(server, "GET", f"/api/auth/me?junk={big}")
    assert_refused(r, "/api/auth/me", 401, "oauth2.token.missing")
    for path in FORM_ENDPOINTS:
        r = await send(server, "POST", f"{path}?code={big}", b"grant_type=x", FORM)
        assert_refused(r, path, 400, "request.validation_failed", "query string")
    await assert_healthy(server)


async def test_repeated_parameters_are_400(server, setup):
    forms = [b"grant_type=authorization_code&code=a&code=b", b"grant_type=refresh_token&grant_type=refresh_token",
             b"token=a&token=b&client_id=x&client_secret=y", b"client_id=a&client_id=a"]
    for path in FORM_ENDPOINTS:
        for body in forms:
            r = await send(server, "POST", path, body, FORM)
            assert_refused(r, path, 400, "request.validation_failed", "more than once")
    for path in FORM_ENDPOINTS:  # credentials in a query string are refused, once or twice
        r = await send(server, "POST", f"{path}?client_secret=a&client_secret=b", b"grant_type=x", FORM)
        assert_refused(r, path, 400, "request.validation_failed", "query string")
    r = await send(server, "GET", "/api/oauth/revocations?since=a&since=b")
    assert_refused(r, "/api/oauth/revocations", 400, "request.validation_failed")
    await assert_healthy(server)


async def test_nul_bytes_and_lone_surrogates(server, setup):
    """NUL in form fields, JSON strings (values and keys), the path, the query string, Basic
    credentials and header values; lone UTF-16 surrogates in JSON strings. PostgreSQL text holds
    neither, so none of it may reach the database: 400 before it does (both backends alike)."""
    for path in FORM_ENDPOINTS:
        for body in (b"grant_type=authorization_code&code=a%00b", b"grant_type=authorization_code&code=a\x00b",
                     b"grant_type%00=x"):
            r = await send(server, "POST", path, body, FORM)
            assert_refused(r, path, 400, "request.validation_failed", "NUL")
        r = await send(server, "POST", path, b"grant_type=authorization_code&code=%ed%a0%80", FORM)
        assert_refused(r, path, 400, "request.validation_failed", "UTF-8")
    app = {"clientId": setup.client_id, "redirectUri": setup.redirect_uri, "scope": ["userinfo"]}
    documents = {
        "/api/auth/login": [{"email": "a\x00@example.com", "password": "x"},
                            {"email": setup.user["email"], "password": "pw\x00"},
                            {"em\x00ail": setup.user["email"], "password": "x"},
                            {"email": "\ud800@example.com", "password": "x"},
                            {"email": setup.user["email"], "password": "\udfff"}],
        "/api/oauth/authorize/external": [{**app, "clientId": setup.client_id + "\x00"},
                                          {**app, "clientId": "\ud800"},
                                          {**app, "redirectUri": setup.redirect_uri + "\x00"},
                                          {**app, "scope": ["userinfo\x00"]},
                                          {**app, "state": "st\x00ate"},
                                          {**app, "state": "st\udc00ate"},
                                          {**app, "codeChallenge": "a" * 42 + "\x00", "codeChallengeMethod": "S256"}],
    }
    for path, bodies in documents.items():
        for document in bodies:
            r = await send(server, "POST", path, json.dumps(document), "application/json", bearer_for(path, setup))
            assert_refused(r, path, 400, "request.validation_failed", "character")
    # %00 anywhere in the path or the query string, whatever reads it (path arguments, query
    # arguments, the authorization page's own parameters)
    session = PageSession(server)
    await session.open_logged_in("/account/apps", setup.user["email"], setup.user["password"])
    cookie = session._cookie_header(server.url + "/console/")
    for method, path in (("GET", "/api/auth/me%00"), ("GET", "/api/oauth/revocations?since=%00"),
                         ("GET", "/api/oauth/revocations?since=cnYxOjA%3D%00"),
                         ("DELETE", f"/api/auth/authorizations/{setup.client_id}%00"),
                         ("GET", f"/api/auth/me?token=%00&access_token={setup.token}%00"),
                         ("GET", f"/oauth/?client_id={setup.client_id}%00&redirect_uri=x&response_type=code"),
                         ("GET", f"/oauth/?client_id={setup.client_id}&redirect_uri={setup.redirect_uri}%00"
                                 "&response_type=code&scope=userinfo"),
                         ("GET", f"/console/apps/{setup.client_id}%00"),
                         ("GET", f"/account/apps/{setup.client_id}%00/revoke"),
                         ("POST", "/account/sessions/ses_x%00/end"), ("GET", "/account/sessions?ended=%00"),
                         ("GET", "/account/?saved=profile&ended=%00"),
                         ("GET", "/login?next=/account/apps%00")):
        r = await send(server, method, path, bearer=setup.token, headers={"Cookie": cookie})
        assert_refused(r, path, 400, None if kind_of(path) == "page" else "request.validation_failed")
    for path in ("/static/%00", "/static/lbauth.css%00", "/static/%00.css"):  # Tornado's own handler
        r = await send(server, "GET", path)
        assert r.status == 404, (path, r.status)
    # raw NUL bytes in the request line and in a header value: Tornado refuses them itself
    r = await raw(server, b"GET /api/auth/me\x00 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert_http_layer_refusal(r, "NUL in the path")
    r = await raw(server, http_request("GET", "/api/auth/me", {"Authorization": b"Bearer ab\x00cd"}))
    assert_http_layer_refusal(r, "NUL in a header value")
    await assert_healthy(server)


# ---- credentials ----------------------------------------------------------------------------------------

def _b64(raw_bytes: bytes) -> str:
    return base64.b64encode(raw_bytes).decode()


def _jwt(header: dict, claims: dict, signature: str = "") -> str:
    part = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{part(header)}.{part(claims)}.{signature}"


async def test_odd_authorization_headers(server, setup):
    """Bearer endpoints: 401 with WWW-Authenticate for any scheme or token they cannot use,
    forged `alg: none` JWTs included. RFC endpoints: 401 invalid_client for odd schemes."""
    tokens = await tokens_for(server, setup)
    forged = _jwt({"alg": "none", "typ": "JWT"}, {"sub": setup.user["userId"],
                                                  "scope": "userinfo", "exp": 4_000_000_000})
    odd = ["Basic " + _b64(b"user:pass"), "Bearer", "Bearer ", "Bearer a b", "Token abc", "Digest username=x",
           "Bearer " + forged, "Bearer " + tokens["accessToken"] + "x", "Bearer " + tokens["accessToken"][:-8],
           "Bearer ...", "Bearer \u00ff\u00fe", "Bearer " + tokens["refreshToken"], "Bearer " + setup.token + "\t x",
           "Bearer " + "a" * (32 * 1024), "Bearer " + _jwt({"alg": "RS256", "kid": "../../etc/passwd"}, {})]
    for header in odd:
        for path in ("/api/auth/me", "/api/service/user/info"):
            r = await send(server, "GET", path, headers={"Authorization": header})
            assert_refused(r, path, 401)
            assert r.headers["WWW-Authenticate"].startswith("Bearer"), (header, r.headers)
        r = await send(server, "POST", "/api/oauth/authorize/external", "{}", "application/json",
                       headers={"Authorization": header})
        assert_refused(r, "/api/oauth/authorize/external", 401)
    form = b"grant_type=authorization_code&code=x&redirect_uri=https%3A%2F%2Fapp.example%2Fcallback&token=x"
    client = setup.client_id.encode()
    rfc_odd = ["Bearer " + tokens["accessToken"], "Basic", "Basic !!!", "Basic " + _b64(b"\xff\xfe:\xfd"),
               "Basic " + _b64(b"no-colon"), "Basic " + _b64(client + b":%zz%00"),
               "Basic " + _b64(client + b"%00:secret"), "Basic " + _b64(client + b"\x00:secret"),
               "Basic " + _b64(b"%ed%a0%80:secret"), "Basic " + _b64(b"a" * 30_000 + b":b"), "Negotiate abc"]
    for header in rfc_odd:
        for path in RFC_ENDPOINTS:
            r = await send(server, "POST", path, form, FORM, headers={"Authorization": header})
            assert_refused(r, path, 401, "oauth2.client.secret_mismatch")
    await assert_healthy(server)


async def test_forged_session_cookies_are_no_session(server, setup):
    """A session cookie that is not a signature of ours, in any format (a value without the `2|`
    prefix reads as Tornado's old v1 format, which asserted against our versioned keys: a 500,
    found by tests/test_fuzz_openapi.py): the visitor is simply not signed in."""
    for value in ("abc", "YWJj|1234567890|deadbeef", "2|1:0|10:1|7:session|4:YQ==|00", "1|x", "\u00e9"):
        cookie = {"Cookie": f"lbauth_session={value}"}
        r = await send(server, "GET", "/account/apps", headers=cookie)
        assert r.status == 200 and "password" in r.text, (value, r.status, r.text[:300])
        r = await send(server, "POST", "/logout", "", FORM, headers=cookie)
        assert_refused(r, "/logout", 403)
    await assert_healthy(server)


# ---- paths and methods ---------------------------------------------------------------------------------

PATHS = [
    "/api/../healthz",
    "/api/auth/../auth/me",
    "/api/%ff%fe",
    "/api/%2e%2e/%2e%2e/etc/passwd",
    "/api/auth/me/..%2f..%2fhealthz",
    "/..%2f..%2fpyproject.toml",
    "/api/auth/authorizations/..%2f..%2fme",
    "/api/oauth/token/code%20",
]


@pytest.mark.parametrize("path", PATHS)
async def test_odd_paths_are_404(server, setup, path):
    r = await raw(server, http_request("GET", path, {"Authorization": f"Bearer {setup.token}"}))
    if path.startswith("/api/auth/authorizations/"):
        assert_refused(r, path, 405, "request.method_not_allowed")  # a client id route, which only DELETEs
    else:
        assert_refused(r, path, 404, "request.not_found")
    await assert_healthy(server)


async def test_static_files_stay_in_their_folder(server, setup):
    """The static route answers Tornado's own (HTML) 403 for paths out of its folder."""
    for path in ("/static/../pyproject.toml", "/static/%2e%2e/%2e%2e/pyproject.toml", "/static/..%2fsetup.cfg"):
        r = await raw(server, http_request("GET", path))
        assert r is not None and r.status in (403, 404), (path, r and r.status)
        assert b"[project]" not in r.body and b"[metadata]" not in r.body
    await assert_healthy(server)


@pytest.mark.parametrize("method", ["PROPFIND", "BREW", "TRACE", "CONNECT"])
async def test_unknown_methods_are_405(server, method):
    for path in ("/api/auth/me", "/api/oauth/token/code", "/oauth/token", "/api/nothing", "/healthz", "/login"):
        r = await raw(server, http_request(method, path))
        assert_refused(r, path, 405)
        if kind_of(path) == "envelope":
            assert_refused(r, path, 405, "request.method_not_allowed")
    await assert_healthy(server)


# ---- OpenID Connect's parameters (contract 15) ---------------------------------------------------------

OPENID_PARAMETERS = ("prompt", "max_age", "login_hint", "id_token_hint", "nonce", "display", "ui_locales",
                     "claims_locales", "acr_values", "claims", "request", "request_uri", "registration",
                     "response_mode")
# Percent-encoded as a client would put them on the wire; the last three are not UTF-8 text at all.
HOSTILE_TEXT = ("", " ", "x" * 4000, "<script>alert(1)</script>", "\r\nSet-Cookie: pwned=1", "' OR '1'='1",
                "../../../etc/passwd", "-1", "1e309", "9" * 40, "NaN", "0x10", "é✓𝄞", "{}", "a.b.c",
                "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.", "a\x00b")
HOSTILE_WIRE = tuple(quote(v, safe="") for v in HOSTILE_TEXT) + ("%ED%A0%80", "%FF", "%C0%AF")
AUTHORIZATION_ERRORS = {"invalid_request", "login_required", "consent_required", "interaction_required",
                        "account_selection_required", "request_not_supported", "request_uri_not_supported",
                        "invalid_scope", "registration_not_supported"}


async def test_openid_parameters_with_hostile_values(server, setup):
    """Every OpenID parameter of the authorization endpoint, by GET and by a relying party's form
    POST, with values no relying party should send: a redirect to the registered URI (a code, or an
    OpenID error with the request's state), or an error page, never a 5xx, never a hang; no header
    injection; no markup echoed; and a code's ID token is signed (never `alg: none`) and carries the
    nonce exactly as sent."""
    browser = PageSession(server)
    page = await browser.open_logged_in(
        oauth_url(front_params(setup.client_id, setup.redirect_uri, scope="openid profile email")),
        setup.user["email"], setup.user["password"])
    await browser.decide(page, "approve")  # a grant that covers every request below
    base = urlencode(front_params(setup.client_id, setup.redirect_uri, scope="openid profile email"))
    jwks = PyJWKSet.from_dict((await server.client.get("/.well-known/jwks.json")).json)
    outcomes: set[str] = set()
    for name in OPENID_PARAMETERS:
        for wire in HOSTILE_WIRE:
            query = f"{base}&{name}={wire}" + ("" if name == "prompt" else "&prompt=none")
            for method in ("GET", "POST"):
                cookie = browser._cookie_header(server.url + "/oauth/")
                if method == "GET":
                    r = await send(server, "GET", f"/oauth/?{query}", headers={"Cookie": cookie})
                else:
                    r = await send(server, "POST", "/oauth/", query, FORM, headers={"Cookie": cookie})
                what = (method, name, wire[:40], r.status)
                assert r.status < 500 and "Traceback" not in r.text, what
                assert "Set-Cookie: pwned" not in str(r.headers) and "pwned" not in r.headers.get("Location", ""), what
                if r.status in (302, 303):
                    answer = redirect_query(r.headers["Location"], setup.redirect_uri)
                    assert answer["state"] == ["st-front"], what
                    if "error" in answer:
                        assert answer["error"][0] in AUTHORIZATION_ERRORS, (what, answer)
                        outcomes.add("error")
                        continue
                    tokens = await exchange(server, answer["code"][0], setup.redirect_uri, setup.client_id,
                                            setup.client_secret)
                    assert tokens.status == 200, (what, tokens.text)
                    id_token = tokens.data["idToken"]
                    header = jwt.get_unverified_header(id_token)
                    assert header["alg"] in ("RS256", "ES256", "EdDSA"), (what, header)
                    claims = jwt.decode(id_token, jwks[header["kid"]].key, algorithms=[header["alg"]],
                                        audience=setup.client_id,  # the server's clock is the test's
                                        options={"verify_iat": False, "verify_exp": False, "verify_nbf": False})
                    if name == "nonce" and wire:
                        assert claims["nonce"] == unquote(wire, errors="strict"), what
                    else:  # a parameter without a value is as if omitted (OpenID Connect Core 3.1.2.1)
                        assert "nonce" not in claims, what
                    outcomes.add("code")
                else:
                    assert_refused(r, "/oauth/", 400)
                    assert "<script>alert" not in r.text, what
                    outcomes.add("page")
    assert outcomes == {"code", "error", "page"}, outcomes  # every kind of answer was met and checked
    await assert_healthy(server)


async def test_logout_and_userinfo_with_hostile_values(server, setup):
    """RP-initiated logout's parameters and UserInfo's token: never a 5xx, never a redirect to a URI
    the app did not register, RFC 6750 errors from UserInfo."""
    for name in ("id_token_hint", "client_id", "post_logout_redirect_uri", "state", "logout_hint", "ui_locales"):
        for wire in HOSTILE_WIRE:
            query = f"{name}={wire}"
            for method in ("GET", "POST"):
                r = (await send(server, "GET", f"/oauth/logout?{query}") if method == "GET"
                     else await send(server, "POST", "/oauth/logout", query, FORM))
                what = (method, name, wire[:40], r.status)
                assert r.status < 500 and "Traceback" not in r.text, what
                assert r.status in (200, 400), what  # the signed-out page, or an error page: no app is known
                assert r.headers.get("Location") is None and "<script>alert" not in r.text, what
    for wire in HOSTILE_WIRE:
        r = await send(server, "POST", "/oauth/userinfo", f"access_token={wire}", FORM)
        assert r.status in (400, 401), (wire[:40], r.status, r.text[:200])
        assert r.json["error"] in ("invalid_request", "invalid_token"), (wire[:40], r.text[:200])
        assert r.headers["WWW-Authenticate"].startswith("Bearer"), wire[:40]
    await assert_healthy(server)

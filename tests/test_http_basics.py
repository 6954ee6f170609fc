"""The envelope on every response (contract section 3), health endpoints, body limits, and 503
when the database goes away."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy.engine import make_url

from tests.conftest import _pg_admin


async def test_health_and_readiness(server):
    assert (await server.client.get("/healthz")).data == {"status": "ok"}
    assert (await server.client.get("/readyz")).data == {"status": "ready"}


async def test_unknown_route_is_an_envelope_404(server):
    for method in ("GET", "POST", "DELETE"):
        r = await server.client.request(method, "/api/nothing/here")
        r.assert_error(404, "request.not_found")
        assert r.headers["Content-Type"].startswith("application/json")


async def test_wrong_method_is_405_with_allow(server):
    r = await server.client.request("DELETE", "/healthz")
    r.assert_error(405, "request.method_not_allowed")
    assert r.headers["Allow"] == "GET"
    r = await server.client.request("GET", "/api/auth/login")
    r.assert_error(405, "request.method_not_allowed")
    assert r.headers["Allow"] == "POST"


async def test_oversized_body_is_413_before_it_is_read(server):
    big = b"x" * (server.settings.max_body_bytes + 1)
    r = await server.client.post("/api/auth/login", body=big, headers={"Content-Type": "application/json"})
    r.assert_error(413, "request.too_large")
    assert (await server.client.get("/healthz")).status == 200


async def test_request_id_is_echoed_or_made(server):
    r = await server.client.get("/healthz", headers={"X-Request-Id": "abc-123"})
    assert r.headers["X-Request-Id"] == "abc-123"
    r = await server.client.get("/healthz", headers={"X-Request-Id": "bad id with spaces"})
    assert r.headers["X-Request-Id"] != "bad id with spaces" and len(r.headers["X-Request-Id"]) == 16


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_database_outage_answers_503_then_recovers(server, database_url):
    """PostgreSQL refuses connections mid-traffic: 503 server.unavailable with Retry-After, no
    traceback; /readyz says not ready; when it is back, everything works without a restart."""
    user = await server.create_user()
    name = make_url(database_url).database
    await _pg_admin([f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false',
                     f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"])
    try:
        for _ in range(3):
            r = await server.client.post("/api/auth/login", json={"email": user["email"], "password": "whatever"})
            r.assert_error(503, "server.unavailable")
            assert int(r.headers["Retry-After"]) > 0
            assert "Traceback" not in r.text and "asyncpg" not in r.text
        ready = await server.client.get("/readyz")
        ready.assert_error(503, "server.unavailable")
        assert (await server.client.get("/healthz")).status == 200
    finally:
        await _pg_admin([f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'])
    assert (await server.client.get("/readyz")).status == 200
    token = await server.login(user["email"], user["password"])
    assert token.startswith("lba_ut_")


async def _two_requests_on_one_connection(server, first: bytes) -> tuple[str, list[str], bytes]:
    """`first`, then `GET /healthz`, on one keep-alive connection: the first answer's status line
    and headers, and what came back for the second (b"" when the server closed the connection)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.running.port)
    try:
        writer.write(first)
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode("latin-1").split("\r\n")
        length = next(int(line.split(":", 1)[1]) for line in head if line.lower().startswith("content-length:"))
        await asyncio.wait_for(reader.readexactly(length), 10)
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: lbauth\r\n\r\n")
            await writer.drain()
            second = await asyncio.wait_for(reader.read(65536), 10)
        except ConnectionError:
            second = b""
        return head[0], head[1:], second
    finally:
        writer.close()


@pytest.mark.parametrize("first", [
    b"GET /oauth%00 HTTP/1.1\r\nHost: lbauth\r\n\r\n",
    b"POST /account/apps%00 HTTP/1.1\r\nHost: lbauth\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    b"Content-Length: 3\r\n\r\na=b",
    b"POST /api/auth/login HTTP/1.1\r\nHost: lbauth\r\nContent-Type: application/json\r\n"
    b"Content-Length: 99999999\r\n\r\n{}",
], ids=["nul-in-path", "nul-in-page-path", "declared-too-large"])
async def test_an_answer_before_the_request_is_read_announces_the_close(server, first):
    """Tornado closes a connection whose request it answered before reading it whole; a client
    told nothing would send its next request into the closed connection (RFC 9112 9.6)."""
    status, headers, second = await _two_requests_on_one_connection(server, first)
    assert status.split(" ")[1] in ("400", "413")
    assert "connection: close" in [h.lower() for h in headers]
    assert second == b""


async def test_keep_alive_survives_an_ordinary_error(server):
    """A 401 after the whole request was read keeps the connection: the next request is answered."""
    status, headers, second = await _two_requests_on_one_connection(
        server, b"GET /api/auth/me HTTP/1.1\r\nHost: lbauth\r\n\r\n")
    assert status.split(" ")[1] == "401" and "connection: close" not in [h.lower() for h in headers]
    assert second.startswith(b"HTTP/1.1 200 ")

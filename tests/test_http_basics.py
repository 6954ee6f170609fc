"""The envelope on every response (contract section 3), health endpoints, body limits, and 503
when the database goes away."""

from __future__ import annotations

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

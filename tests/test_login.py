"""POST /api/auth/login (contract section 4)."""

from __future__ import annotations

import logging

from sqlalchemy import text

from tests.conftest import start_server


async def test_login_gives_a_user_token(server):
    user = await server.create_user("Login@Example.com")
    r = await server.client.post("/api/auth/login", json={"email": "login@example.com", "password": user["password"]})
    assert r.status == 200
    data = r.data
    assert data["token"].startswith("lba_ut_") and len(data["token"]) >= 7 + 43
    assert data["expiresIn"] == server.settings.user_token_ttl
    assert r.headers["Cache-Control"] == "no-store"


async def test_login_failures_look_alike(server):
    user = await server.create_user()
    wrong_password = await server.client.post("/api/auth/login", json={"email": user["email"], "password": "nope"})
    unknown_email = await server.client.post("/api/auth/login", json={"email": "ghost@example.com", "password": "x"})
    for r in (wrong_password, unknown_email):
        body = r.assert_error(401, "auth.login.failed")
        assert body["message"] == "The email or password is wrong."


async def test_login_validation(server):
    c = server.client
    (await c.post("/api/auth/login", json={"email": "a@example.com"})).assert_error(400, "request.validation_failed")
    missing = (await c.post("/api/auth/login", json={})).json
    assert missing["message"].startswith("Field required")
    (await c.post("/api/auth/login", body="{not json", headers={"Content-Type": "application/json"})
     ).assert_error(400, "request.validation_failed")
    (await c.post("/api/auth/login", json=["a", "b"])).assert_error(400, "request.validation_failed")
    (await c.post("/api/auth/login", json={"email": 5, "password": []})).assert_error(400, "request.validation_failed")
    (await c.post("/api/auth/login", body=b"\xff\xfe", headers={"Content-Type": "application/json"})
     ).assert_error(400, "request.validation_failed")


async def test_passwords_are_hashed_at_the_configured_cost_rfc_9106_by_default(tmp_path, database_url):
    """A server with the default cost hashes a new password with t=3, 64 MiB, p=4; a hash made at
    another cost still verifies (it names its own), and a production server whose cost is below
    OWASP's minimum says so when it starts."""
    def stored(conn):
        return conn.execute(text("SELECT password_hash FROM users WHERE email = :e"), {"e": user["email"]}).scalar()

    cheap = await start_server(tmp_path, database_url, argon2="t=2,m=16,p=1")
    user = await cheap.create_user()
    assert (await cheap.db.read(stored)).startswith("$argon2id$v=19$m=16,t=2,p=1$")
    cheap.client.close()
    await cheap.running.stop()
    server = await start_server(tmp_path, database_url, argon2=None)
    try:
        token = await server.login(user["email"], user["password"])  # made at the other cost
        changed = await server.client.post("/api/account/password", bearer=token, json={
            "currentPassword": user["password"], "newPassword": "a brand new password"})
        assert changed.status == 200, changed.text
        assert (await server.db.read(stored)).startswith("$argon2id$v=19$m=65536,t=3,p=4$")
        await server.login(user["email"], "a brand new password")
    finally:
        server.client.close()
        await server.running.stop()


async def test_production_warns_of_a_cost_below_owasps_minimum(tmp_path, database_url, caplog):
    caplog.set_level(logging.WARNING, logger="lbauth")
    for cost, warned in (("t=2,m=19456,p=1", False), ("t=1,m=19456,p=1", True), (None, False)):
        caplog.clear()
        server = await start_server(tmp_path, database_url, argon2=cost)
        server.client.close()
        await server.running.stop()
        assert any("below OWASP's minimum" in r.getMessage() for r in caplog.records) is warned, cost

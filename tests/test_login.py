"""POST /api/auth/login (contract section 4)."""

from __future__ import annotations


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

"""No token, code, secret or password in a log line (contract sections 3 and 13)."""

from __future__ import annotations

import io
import json
import logging

from lbauth import logs


async def test_login_and_app_creation_log_no_secret(server, caplog):
    caplog.set_level(logging.DEBUG)
    user = await server.create_user(password="pw-in-logs-123")
    token = await server.login(user["email"], "pw-in-logs-123")
    await server.client.post("/api/auth/login", json={"email": user["email"], "password": "wrong-pw-456"})
    app = await server.create_app(user["email"])
    await server.client.get("/healthz", headers={"Authorization": f"Bearer {token}"})
    text = "\n".join(record.getMessage() + json.dumps(getattr(record, "fields", {})) for record in caplog.records)
    assert "/api/auth/login" in text  # the access log did see the requests
    for secret in ("pw-in-logs-123", "wrong-pw-456", token, app["clientSecret"], app["webhookSecret"]):
        assert secret not in text


def test_every_log_line_is_json_and_redacted():
    stream = io.StringIO()
    handler = logs.setup("INFO", stream=stream)
    try:
        log = logging.getLogger("lbauth.test")
        log.info("token lba_rt_%s in a message", "A" * 43)
        log.info("form client_secret=lba_cs_xyz&code=abc body {\"password\": \"pw\"}")
        try:
            raise ValueError("Authorization: Bearer lba_at_eyJhbGciOi.payload.sig")
        except ValueError:
            log.exception("failed")
    finally:
        logging.getLogger().removeHandler(handler)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert len(lines) == 3 and all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)
    dump = stream.getvalue()
    for secret in ("A" * 43, "lba_cs_xyz", "code=abc", '"pw"', "eyJhbGciOi"):
        assert secret not in dump
    assert "[redacted]" in lines[0]["msg"] and "ValueError" in lines[2]["error"]

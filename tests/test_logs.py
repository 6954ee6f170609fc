"""Log lines are JSON with credentials redacted (the whole flow's logs are checked in
test_no_secrets_in_logs.py)."""

from __future__ import annotations

import io
import json
import logging

from lbauth import logs


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

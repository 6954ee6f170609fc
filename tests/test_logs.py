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


def test_every_credential_prefix_is_redacted():
    """Each kind of lbauth credential, the second step's pending token (lba_mt_) among them."""
    stream = io.StringIO()
    handler = logs.setup("INFO", stream=stream)
    kinds = ("ac", "at", "rt", "ut", "cs", "whs", "iat", "rat", "su", "ev", "ec", "pr", "mt", "dc")
    try:
        for kind in kinds:
            logging.getLogger("lbauth.test").info("seen lba_%s_%s here", kind, "S3cr3t" * 5)
    finally:
        logging.getLogger().removeHandler(handler)
    dump = stream.getvalue()
    assert "S3cr3t" not in dump and dump.count("[redacted]") == len(kinds)

"""Structured logs (contract section 13): one JSON object per line on standard error, and one
redaction filter that every record passes through, so no token, code, secret or password can
reach a log line even by accident (an exception message, a URL, a driver error)."""

from __future__ import annotations

import contextvars
import json
import logging
import re
import sys
import time

from lbauth import tracing

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("lbauth_request_id", default=None)

_SECRET_PATTERNS = (
    # Every lbauth credential carries a prefix: codes, access, refresh and user tokens, client and
    # webhook secrets, emailed links' tokens. Access tokens continue with a JWT (dots), hence the dot.
    (re.compile(r"\blba_(ac|at|rt|ut|cs|whs|iat|rat|su|ev|ec|pr|mt|pk|ru|dc)_[A-Za-z0-9_.\-]+"), r"lba_\1_[redacted]"),
    # form/query pairs and JSON members whose name says they hold a secret
    (re.compile(r"(?i)\b(password|client_secret|code_verifier|refresh_token|access_token|token|code|user_code)=[^&\s\"']+"),
     r"\1=[redacted]"),
    (re.compile(r"(?i)\"(password|client_?secret|webhook_?secret|refresh_?token|access_?token|token|code_verifier)"
                r"\"\s*:\s*\"[^\"]*\""), r'"\1": "[redacted]"'),
    (re.compile(r"(?i)\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]+"), r"\1 [redacted]"),
    (re.compile(r"mk1\.[0-9a-f]{12}\.[A-Za-z0-9_\-]+"), "mk1.[sealed]"),
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"), "[private key]"),
)


def redact(text: str) -> str:
    for pattern, replacement in _SECRET_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    """Formats the message once, redacts it, and freezes the result into the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = redact(record.getMessage())
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        record.exc_info = None
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            entry["requestId"] = rid
        if tracing.active is not None:  # the trace this line belongs to (LBAUTH_OTEL=on)
            traceparent = tracing.active.traceparent()
            if traceparent:
                entry["traceId"], entry["spanId"] = traceparent[3:35], traceparent[36:52]
        for key, value in getattr(record, "fields", {}).items():
            entry[key] = value
        if record.exc_text:
            entry["error"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)


def setup(level: str = "INFO", stream=None) -> logging.Handler:
    """Route every logger (ours, Tornado's, SQLAlchemy's, asyncio's) through the filter and formatter."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(RedactingFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_lbauth", False):
            root.removeHandler(old)
    handler._lbauth = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level)
    logging.getLogger("alembic").setLevel(max(logging.WARNING, root.level))
    return handler


def event(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: object) -> None:
    """Log a message with structured fields (never pass a secret as a field)."""
    logger.log(level, message, extra={"fields": fields})

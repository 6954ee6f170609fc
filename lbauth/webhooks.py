"""Webhook signatures (spec section 6): what lbauth sends, and the helper receiving apps use.

The signed string is `<X-Service-Timestamp>.<raw body>`; the signature is the lowercase hex
HMAC-SHA256 of it, keyed with the app's webhook secret. Standard library only.

    from lbauth.webhooks import InvalidSignature, verify_signature
    try:
        verify_signature(secret, request.headers["X-Service-Timestamp"], request.body,
                         request.headers["X-Service-Signature"])
    except InvalidSignature as exc:
        return 401, str(exc)
"""

from __future__ import annotations

import hashlib
import hmac
import time

TOLERANCE_SECONDS = 300


class InvalidSignature(Exception):
    """The request is not a genuine, fresh lbauth webhook; the message says why."""


def sign(secret: str, timestamp: str, raw_body: bytes) -> str:
    message = timestamp.encode("ascii") + b"." + raw_body
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def verify_signature(secret: str, timestamp: str, raw_body: bytes, signature: str, *,
                     tolerance: int = TOLERANCE_SECONDS, now: float | None = None) -> None:
    """Raise InvalidSignature unless `signature` is right for this body and timestamp, and the
    timestamp is within `tolerance` seconds of `now` (spec section 6, receiver steps 1 and 2).
    Compare the raw body as received: re-serialized JSON does not verify."""
    if not isinstance(timestamp, str) or not (timestamp.isascii() and timestamp.isdigit()):
        raise InvalidSignature("X-Service-Timestamp is missing or not a Unix time in seconds")
    if not isinstance(signature, str) or not signature:
        raise InvalidSignature("X-Service-Signature is missing")
    if not signature.isascii():
        raise InvalidSignature("signature does not match")
    if not isinstance(raw_body, bytes | bytearray):
        raise InvalidSignature("raw_body must be the request body as bytes, exactly as received")
    expected = sign(secret, timestamp, bytes(raw_body))
    if not hmac.compare_digest(expected.encode(), signature.strip().lower().encode()):
        raise InvalidSignature("signature does not match")
    current = time.time() if now is None else now
    if abs(current - int(timestamp)) > tolerance:
        raise InvalidSignature(f"timestamp is more than {tolerance} seconds from now")

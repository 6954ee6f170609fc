"""TOTP (RFC 6238) as authenticator apps use it: HMAC-SHA-1, 6 digits, 30-second steps.

The secret is 20 random bytes (RFC 4226 4: at least 128 bits, 160 recommended), shown to the user
in base32 without padding, the form authenticator apps read from `otpauth://` URIs.
"""

from __future__ import annotations

import base64
import hmac
import secrets
import struct
from urllib.parse import quote, urlencode

DIGITS, PERIOD, WINDOW = 6, 30, 1  # RFC 6238 4 and 5.2: ±1 step of clock drift accepted
ISSUER = "lbauth"


def new_secret() -> str:
    return base64.b32encode(secrets.token_bytes(20)).decode().rstrip("=")


def _key(secret: str) -> bytes:
    return base64.b32decode(secret.upper() + "=" * (-len(secret) % 8))


def code_at(secret: str, step: int) -> str:
    """RFC 4226 5.3 HOTP of the time step (RFC 6238 4.2: T = floor(unix time / 30))."""
    mac = hmac.new(_key(secret), struct.pack(">Q", step), "sha1").digest()
    offset = mac[-1] & 0x0F
    (value,) = struct.unpack(">I", mac[offset:offset + 4])
    return str((value & 0x7FFFFFFF) % 10 ** DIGITS).zfill(DIGITS)


def step_of(now: float) -> int:
    return int(now // PERIOD)


def matching_step(secret: str, code: str, now: float) -> int | None:
    """The time step (now ±1) whose code `code` is, or None; every candidate compared in constant time."""
    if not (isinstance(code, str) and len(code) == DIGITS and code.isascii() and code.isdigit()):
        return None
    current, found = step_of(now), None
    for step in range(current - WINDOW, current + WINDOW + 1):
        if hmac.compare_digest(code_at(secret, step), code):
            found = step
    return found


def otpauth_uri(secret: str, account: str) -> str:
    """The Key Uri Format authenticator apps read from the QR code."""
    query = urlencode({"secret": secret, "issuer": ISSUER, "algorithm": "SHA1", "digits": DIGITS, "period": PERIOD})
    return f"otpauth://totp/{quote(ISSUER)}:{quote(account, safe='@')}?{query}"


def qr_svg(uri: str) -> str:
    """The URI as a QR code, an inline SVG (segno: pure Python, no image service)."""
    import io

    import segno

    out = io.BytesIO()
    segno.make(uri, error="m").save(out, kind="svg", scale=4, xmldecl=False, svgns=True, title="TOTP QR code")
    return out.getvalue().decode()

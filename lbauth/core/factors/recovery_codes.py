"""Recovery codes (contract 19): ten single-use codes `xxxx-xxxx-xx`, 10 characters of a 31-symbol
alphabet without look-alikes (0/o, 1/l/i): about 50 random bits each. Random and long like our other
opaque credentials, so they are stored as a plain SHA-256 digest (lbauth.core.crypto.opaque)."""

from __future__ import annotations

import secrets

from lbauth.core.crypto import opaque

ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # 31 symbols: 10 of them are 49.5 bits
COUNT, LENGTH = 10, 10


def new_codes() -> list[str]:
    return [_shown("".join(secrets.choice(ALPHABET) for _ in range(LENGTH))) for _ in range(COUNT)]


def _shown(raw: str) -> str:
    return f"{raw[:4]}-{raw[4:8]}-{raw[8:]}"


def normalized(code: object) -> str | None:
    """A code as typed (any case, with or without dashes or spaces) in its stored form, or None."""
    if not isinstance(code, str) or len(code) > 40:
        return None
    raw = code.strip().lower().replace("-", "").replace(" ", "")
    if len(raw) != LENGTH or any(c not in ALPHABET for c in raw):
        return None
    return _shown(raw)


def digest(code: str) -> str:
    return opaque.digest("lbauth recovery code " + code)

"""User passwords: argon2id (RFC 9106) through argon2-cffi, run off the event loop.

Verifying costs about 190 ms of CPU by design; callers run it in a worker thread. An unknown
email is checked against a dummy hash so that timing does not reveal which emails exist.
"""

from __future__ import annotations

import asyncio
import functools

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

_hasher = PasswordHasher()  # argon2id with the library's RFC 9106 defaults


@functools.cache
def _dummy_hash() -> str:
    """Made on first use, not at import: 150 ms that every `lbauth` command would pay."""
    return _hasher.hash("lbauth dummy password for unknown accounts")

MIN_LENGTH, MAX_LENGTH = 10, 256


def weakness(password: str, email: str) -> str | None:
    """The one password policy, for every password a person sets (an operator's `lbauth users
    create`, a user's change): None if `password` is acceptable, else why not, for
    `account.password.weak`. 10 to 256 characters, no composition rules (NIST SP 800-63B 5.1.1.2),
    not the email (letter case aside)."""
    if len(password) < MIN_LENGTH:
        return f"The password must be at least {MIN_LENGTH} characters."
    if len(password) > MAX_LENGTH:
        return f"The password must be at most {MAX_LENGTH} characters."
    if password.strip().lower() == email.strip().lower():
        return "The password must not be the account's email."
    return None


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_hasher.hash, password)


async def verify_password(stored_hash: str | None, password: str) -> bool:
    """False for no stored hash (None: an unknown email; "": an erased account), after as long."""
    return await asyncio.to_thread(_verify, stored_hash or _dummy_hash(), password, bool(stored_hash))


def _verify(stored_hash: str, password: str, real: bool) -> bool:
    try:
        ok = _hasher.verify(stored_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
    return ok and real

"""User passwords: argon2id (RFC 9106) through argon2-cffi, run off the event loop.

Verifying costs about 190 ms of CPU by design; callers run it in a worker thread. An unknown
email is checked against a dummy hash so that timing does not reveal which emails exist.
"""

from __future__ import annotations

import asyncio

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

_hasher = PasswordHasher()  # argon2id with the library's RFC 9106 defaults
_DUMMY_HASH = _hasher.hash("lbauth dummy password for unknown accounts")

MIN_LENGTH = 8  # accounts an operator creates (`lbauth users create`)
NEW_PASSWORD_MIN_LENGTH = 10  # a password a user chooses (contract 3: account.password.weak)


def is_weak(password: str, email: str) -> bool:
    """Contract 3: under 10 characters, or equal to the email (letter case aside)."""
    return len(password) < NEW_PASSWORD_MIN_LENGTH or password.strip().lower() == email.strip().lower()


async def hash_password(password: str) -> str:
    return await asyncio.to_thread(_hasher.hash, password)


async def verify_password(stored_hash: str | None, password: str) -> bool:
    """False for no stored hash (None: an unknown email; "": an erased account), after as long."""
    return await asyncio.to_thread(_verify, stored_hash or _DUMMY_HASH, password, bool(stored_hash))


def _verify(stored_hash: str, password: str, real: bool) -> bool:
    try:
        ok = _hasher.verify(stored_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
    return ok and real

"""User passwords: argon2id (RFC 9106) through argon2-cffi, run off the event loop.

The cost of new hashes is a setting (LBAUTH_ARGON2: time cost, memory in KiB, parallelism), RFC
9106's second recommended option by default (t=3, 64 MiB, p=4: about 150 ms of CPU); a stored hash
is verified with the cost it was made with. Callers run both in a worker thread. An unknown email
is checked against a dummy hash of the current cost, so that timing does not reveal which emails
exist.
"""

from __future__ import annotations

import asyncio
import functools

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from lbauth.settings import DEFAULT_ARGON2

Cost = tuple[int, int, int]  # (time cost, memory in KiB, parallelism)
DEFAULT_COST: Cost = DEFAULT_ARGON2
# OWASP's minimum (Password Storage Cheat Sheet): 7 to 46 MiB of memory, more passes for less.
OWASP_MINIMUM_KIB = 7168
OWASP_MINIMUM_KIB_PASSES = 5 * OWASP_MINIMUM_KIB


@functools.cache
def _hasher(cost: Cost) -> PasswordHasher:
    time_cost, memory_kib, parallelism = cost
    return PasswordHasher(time_cost=time_cost, memory_cost=memory_kib, parallelism=parallelism)


@functools.cache
def _dummy_hash(cost: Cost) -> str:
    """Made on first use, not at import: 150 ms that every `lbauth` command would pay."""
    return _hasher(cost).hash("lbauth dummy password for unknown accounts")


def below_owasp_minimum(cost: Cost) -> bool:
    time_cost, memory_kib, _ = cost
    return memory_kib < OWASP_MINIMUM_KIB or time_cost * memory_kib < OWASP_MINIMUM_KIB_PASSES


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


async def hash_password(password: str, cost: Cost = DEFAULT_COST) -> str:
    return await asyncio.to_thread(_hasher(cost).hash, password)


async def verify_password(stored_hash: str | None, password: str, cost: Cost = DEFAULT_COST) -> bool:
    """False for no stored hash (None: an unknown email; "": an erased account), after as long as
    a hash of `cost` takes."""
    return await asyncio.to_thread(_verify, stored_hash or _dummy_hash(cost), password, bool(stored_hash))


def _verify(stored_hash: str, password: str, real: bool) -> bool:
    try:
        ok = _hasher(DEFAULT_COST).verify(stored_hash, password)  # the hash names its own cost
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
    return ok and real

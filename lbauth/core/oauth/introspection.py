"""Token introspection (RFC 7662) for clients: is this token live, and what does it say?"""

from __future__ import annotations

from typing import Any

from lbauth.clock import Clock
from lbauth.core.crypto import opaque
from lbauth.storage.db import Database
from lbauth.storage.records import App
from lbauth.storage.repo import changes as changes_repo
from lbauth.storage.repo import tokens as tokens_repo
from lbauth.verify import TokenError, decode_access_token


def access_token_claims(token: str, keys: dict[str, Any], issuer: str, audience: str | None,
                        now: int) -> dict[str, Any] | None:
    """The claims of an unexpired access token this server signed, or None (no clock leeway)."""
    try:
        return decode_access_token(token, keys, issuer=issuer, audience=audience, now=now, leeway=0)
    except TokenError:
        return None


async def introspect(db: Database, clock: Clock, keys: dict[str, Any], *, app: App, token: str, issuer: str,
                     audience: str | None) -> dict[str, Any]:
    """RFC 7662 2.2. Reads the database, so a revocation made by any process shows at once. A
    client learns only about its own tokens: anything else is {"active": false}."""
    now = int(clock.now())
    inactive = {"active": False}
    if opaque.has_prefix(token, opaque.REFRESH_TOKEN):
        row = await db.read(tokens_repo.by_hash, opaque.digest(token))
        if row is None or row.app_id != app.id or row.revoked_at is not None or row.expires_at <= now:
            return inactive
        # No token_type: RFC 7662 2.2 names access-token types there (contract 7).
        return {"active": True, "client_id": app.client_id, "sub": row.user_id,
                "scope": " ".join(row.scopes), "iat": row.created_at, "exp": row.expires_at, "iss": issuer}
    claims = access_token_claims(token, keys, issuer, audience, now)
    if claims is None or claims["client_id"] != app.client_id:
        return inactive
    if await db.read(changes_repo.covers, claims.get("gid"), claims["jti"], int(claims["iat"]), now):
        return inactive
    return {"active": True, "token_type": "Bearer", **{k: claims[k] for k in (
        "scope", "client_id", "sub", "iat", "exp", "iss", "aud", "jti") if k in claims}}

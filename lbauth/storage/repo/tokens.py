"""Refresh tokens, by digest (spec section 3: not rotated, reusable until they expire). They are
stored by the code redemption (repo/codes.py)."""

from __future__ import annotations

from sqlalchemy import Connection, bindparam, select, update

from lbauth.storage.models import apps, refresh_tokens
from lbauth.storage.records import ClientRefreshToken, RefreshToken
from lbauth.storage.repo import shaped

# The refresh hot path in one statement: the token, if the client presenting it is its app and
# the secret's digest is right (matched like the token's own digest). Built once: see repo/codes.py.
_FOR_CLIENT = shaped(ClientRefreshToken, select(refresh_tokens, apps.c.id_token_alg)
                     .join(apps, apps.c.id == refresh_tokens.c.app_id)
                     .where(refresh_tokens.c.token_hash == bindparam("token_hash"),
                            apps.c.client_id == bindparam("client_id"),
                            apps.c.client_secret_hash == bindparam("client_secret_hash")))
_ALL = shaped(RefreshToken, select(refresh_tokens))


def by_hash(conn: Connection, token_hash: str) -> RefreshToken | None:
    row = conn.execute(_ALL.where(refresh_tokens.c.token_hash == token_hash)).first()
    return RefreshToken(*row) if row is not None else None


def for_client(conn: Connection, token_hash: str, client_id: str,
               client_secret_hash: str) -> ClientRefreshToken | None:
    row = conn.execute(_FOR_CLIENT, {"token_hash": token_hash, "client_id": client_id,
                                     "client_secret_hash": client_secret_hash}).first()
    return ClientRefreshToken(*row) if row is not None else None


def revoke_one(conn: Connection, token_hash: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.token_hash == token_hash,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))


def revoke_from_code(conn: Connection, code_hash: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.code_hash == code_hash,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))


def revoke_for_grant(conn: Connection, grant_id: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.grant_id == grant_id,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))

"""Refresh tokens, by digest (spec section 3: not rotated, reusable until they expire)."""

from __future__ import annotations

from sqlalchemy import Connection, Row, insert, select, update

from lbauth.storage.models import refresh_tokens


def insert_refresh_token(conn: Connection, **values: object) -> None:
    conn.execute(insert(refresh_tokens).values(**values))


def by_hash(conn: Connection, token_hash: str) -> Row | None:
    return conn.execute(select(refresh_tokens).where(refresh_tokens.c.token_hash == token_hash)).first()


def revoke_one(conn: Connection, token_hash: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.token_hash == token_hash,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))


def revoke_from_code(conn: Connection, code_hash: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.code_hash == code_hash,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))


def revoke_for_grant(conn: Connection, grant_id: str, now: int) -> None:
    conn.execute(update(refresh_tokens).where(refresh_tokens.c.grant_id == grant_id,
                                              refresh_tokens.c.revoked_at.is_(None)).values(revoked_at=now))

"""Authorization codes: issued once, redeemed at most once (spec section 2)."""

from __future__ import annotations

from sqlalchemy import Connection, Row, insert, select, update

from lbauth.storage.models import authorization_codes as codes


def insert_code(conn: Connection, **values: object) -> None:
    conn.execute(insert(codes).values(**values))


def claim(conn: Connection, *, code_hash: str, app_id: str, redirect_uri: str, challenge: str | None, now: int,
          access_jti: str) -> Row | None:
    """Mark the code used if, and only if, everything about it is right, in one statement.

    The row count decides the race: of any number of concurrent claims exactly one matches
    `used_at IS NULL` (STYLE habit 5). Nothing is consumed when a check fails.
    """
    statement = (update(codes)
                 .where(codes.c.code_hash == code_hash, codes.c.app_id == app_id,
                        codes.c.redirect_uri == redirect_uri, codes.c.code_challenge.is_not_distinct_from(challenge),
                        codes.c.used_at.is_(None), codes.c.revoked_at.is_(None), codes.c.expires_at > now)
                 .values(used_at=now, access_jti=access_jti)
                 .returning(codes.c.user_id, codes.c.grant_id, codes.c.asu, codes.c.scopes))
    return conn.execute(statement).first()


def by_hash(conn: Connection, code_hash: str) -> Row | None:
    return conn.execute(select(codes).where(codes.c.code_hash == code_hash)).first()


def revoke_for_grant(conn: Connection, grant_id: str, now: int) -> None:
    conn.execute(update(codes).where(codes.c.grant_id == grant_id, codes.c.used_at.is_(None),
                                     codes.c.revoked_at.is_(None)).values(revoked_at=now))

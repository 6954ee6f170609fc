"""Apps that registered themselves (RFC 7591, RFC 7592) and the initial access tokens that let them."""

from __future__ import annotations

from sqlalchemy import Connection, delete, exists, insert, select

from lbauth.storage.models import apps, grants, registration_tokens


def insert_initial_token(conn: Connection, *, token_hash: str, now: int, expires_at: int) -> None:
    conn.execute(insert(registration_tokens).values(token_hash=token_hash, created_at=now, expires_at=expires_at))


def initial_token_live(conn: Connection, token_hash: str, now: int) -> bool:
    """Is there an initial access token of this digest, not expired? The digest is matched in SQL:
    no secret is compared in Python (see lbauth.core.crypto.opaque)."""
    query = select(exists().where(registration_tokens.c.token_hash == token_hash,
                                  registration_tokens.c.expires_at > now))
    return bool(conn.execute(query).scalar())


def delete_expired_initial_tokens(conn: Connection, now: int) -> None:
    conn.execute(delete(registration_tokens).where(registration_tokens.c.expires_at <= now))


def live_grant_ids_of_app(conn: Connection, app_id: str) -> list[str]:
    query = select(grants.c.id).where(grants.c.app_id == app_id, grants.c.revoked_at.is_(None))
    return list(conn.execute(query).scalars())


def delete_app(conn: Connection, app_id: str) -> bool:
    """The app and, by cascade, its grants, codes, refresh tokens, subjects and webhook events."""
    return conn.execute(delete(apps).where(apps.c.id == app_id)).rowcount == 1

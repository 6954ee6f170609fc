"""Apps that registered themselves (RFC 7591, RFC 7592) and the initial access tokens that let them."""

from __future__ import annotations

from typing import Any

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


def insert_dynamic_app(conn: Connection, *, app_id: str, client_id: str, name: str, client_secret_hash: str,
                       redirect_uris: list[str], scopes: list[str], webhook_secret_sealed: str, now: int,
                       id_token_alg: str, token_endpoint_auth_method: str, registration_token_hash: str,
                       client_metadata: dict[str, Any]) -> None:
    """An app with no owner, registered by the client itself (`registration` dynamic)."""
    conn.execute(insert(apps).values(
        id=app_id, client_id=client_id, name=name, owner_id=None, client_secret_hash=client_secret_hash,
        redirect_uris=redirect_uris, scopes=scopes, webhook_url=None, webhook_secret_sealed=webhook_secret_sealed,
        created_at=now, updated_at=now, id_token_alg=id_token_alg, post_logout_redirect_uris=[],
        token_endpoint_auth_method=token_endpoint_auth_method, registration="dynamic",
        registration_token_hash=registration_token_hash, client_metadata=client_metadata))


def live_grant_ids_of_app(conn: Connection, app_id: str) -> list[str]:
    query = select(grants.c.id).where(grants.c.app_id == app_id, grants.c.revoked_at.is_(None))
    return list(conn.execute(query).scalars())


def delete_app(conn: Connection, app_id: str) -> bool:
    """The app and, by cascade, its grants, codes, refresh tokens, subjects and webhook events."""
    return conn.execute(delete(apps).where(apps.c.id == app_id)).rowcount == 1

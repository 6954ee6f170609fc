"""App rows of client ID metadata documents (contract 17): public (`none`, no secret), no owner,
`registration='document'`, the document itself in `client_metadata`, and its cache expiry."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, insert, update

from lbauth.storage.models import apps
from lbauth.storage.records import PUBLIC_CLIENT_METHOD
from lbauth.storage.repo import duplicate_refused

REGISTRATION = "document"


def update_document_app(conn: Connection, *, client_id: str, name: str, redirect_uris: list[str],
                        metadata: dict[str, Any], expires_at: int, now: int) -> bool:
    """A newly fetched copy of a stored document; False when no such row exists yet."""
    result = conn.execute(update(apps).where(apps.c.client_id == client_id, apps.c.registration == REGISTRATION)
                          .values(name=name, redirect_uris=redirect_uris, client_metadata=metadata,
                                  document_expires_at=expires_at, updated_at=now))
    return result.rowcount > 0


def insert_document_app(conn: Connection, *, app_id: str, client_id: str, name: str, redirect_uris: list[str],
                        scopes: list[str], metadata: dict[str, Any], expires_at: int, now: int,
                        webhook_secret_sealed: str) -> None:
    """The first copy of a document (raises Duplicate when a concurrent request stored it first)."""
    with duplicate_refused("app"):
        conn.execute(insert(apps).values(
                id=app_id, client_id=client_id, name=name, owner_id=None, client_secret_hash="",
            redirect_uris=redirect_uris,
            scopes=scopes, webhook_url=None, webhook_secret_sealed=webhook_secret_sealed, created_at=now,
            updated_at=now, token_endpoint_auth_method=PUBLIC_CLIENT_METHOD, registration=REGISTRATION,
            registration_token_hash=None,
            client_metadata=metadata, document_expires_at=expires_at))

"""Registered applications."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, bindparam, delete, exists, func, insert, or_, select, update

from lbauth.storage.models import apps, grants, subjects, users
from lbauth.storage.records import App, AppChanges, ClientMetadata, Registration
from lbauth.storage.repo import duplicate_refused, shaped

_WITH_OWNER = shaped(App, select(apps, users.c.email.label("owner_email"))
                     .outerjoin(users, users.c.id == apps.c.owner_id))
_BY_CLIENT_ID = _WITH_OWNER.where(apps.c.client_id == bindparam("client_id"))  # built once: see repo/codes.py
# For a change of the fields kept together in `client_metadata`: no concurrent change is lost.
_BY_CLIENT_ID_LOCKED = _BY_CLIENT_ID.with_for_update(of=apps)


def insert_app(conn: Connection, metadata: ClientMetadata, *, app_id: str, client_id: str, owner_id: str | None,
               client_secret_hash: str, webhook_secret_sealed: str, now: int,
               registration_token_hash: str | None = None, document_expires_at: int | None = None) -> None:
    """Every app, however it was registered (raises Duplicate when its client id is taken: a
    metadata document stored first by a concurrent request)."""
    with duplicate_refused("app"):
        conn.execute(insert(apps).values(
            id=app_id, client_id=client_id, owner_id=owner_id, client_secret_hash=client_secret_hash,
            webhook_secret_sealed=webhook_secret_sealed, created_at=now, updated_at=now,
            registration_token_hash=registration_token_hash, document_expires_at=document_expires_at,
            **metadata.columns()))


def update_document_app(conn: Connection, client_id: str, metadata: ClientMetadata, *, expires_at: int,
                        now: int) -> bool:
    """A newly fetched copy of a stored metadata document; False when no such row exists yet."""
    result = conn.execute(update(apps)
                          .where(apps.c.client_id == client_id, apps.c.registration == Registration.DOCUMENT.value)
                          .values(document_expires_at=expires_at, updated_at=now, **metadata.columns()))
    return result.rowcount > 0


def _unapproved_documents() -> list[Any]:
    """Conditions for a metadata-document app that no user has approved (no grant, even a revoked
    one, and no pairwise subject)."""
    return [apps.c.registration == Registration.DOCUMENT.value,
            ~exists().where(grants.c.app_id == apps.c.id), ~exists().where(subjects.c.app_id == apps.c.id)]


def count_unapproved_documents(conn: Connection, host: str) -> int:
    """How many unapproved document apps have a client id on `host` (any scheme and port)."""
    escaped = host.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    client_id = func.lower(apps.c.client_id)
    on_host = or_(*(client_id.like(f"{scheme}://{escaped}{after}%", escape="\\")
                    for scheme in ("https", "http") for after in ("/", ":")))
    return conn.execute(select(func.count()).select_from(apps).where(on_host, *_unapproved_documents())).scalar_one()


def delete_unapproved_documents(conn: Connection, now: int) -> int:
    """Delete the unapproved document apps whose stored copy expired before `now`."""
    result = conn.execute(delete(apps).where(apps.c.document_expires_at < now, *_unapproved_documents()))
    return result.rowcount


def by_client_id(conn: Connection, client_id: str, *, lock: bool = False) -> App | None:
    """`lock`: the app row is locked until the transaction ends (PostgreSQL; SQLite has one writer)."""
    row = conn.execute(_BY_CLIENT_ID_LOCKED if lock else _BY_CLIENT_ID, {"client_id": client_id}).first()
    return App(*row) if row is not None else None


def by_id(conn: Connection, app_id: str) -> App | None:
    row = conn.execute(_WITH_OWNER.where(apps.c.id == app_id)).first()
    return App(*row) if row is not None else None


def all_apps(conn: Connection, owner_id: str | None = None) -> list[App]:
    query = _WITH_OWNER.order_by(apps.c.created_at, apps.c.id)
    if owner_id is not None:
        query = query.where(apps.c.owner_id == owner_id)
    return [App(*row) for row in conn.execute(query)]


def update_app(conn: Connection, app_id: str, changes: AppChanges, now: int) -> None:
    """Write the changed settings, and `updated_at`; nothing at all when nothing changed."""
    columns = changes.columns()
    if columns:
        conn.execute(update(apps).where(apps.c.id == app_id).values(updated_at=now, **columns))


def webhook_secrets(conn: Connection) -> list[tuple[str, str]]:
    """(app id, sealed webhook secret) of every app, for master key rotation (core/crypto/reseal.py)."""
    return [(app_id, sealed) for app_id, sealed in conn.execute(select(apps.c.id, apps.c.webhook_secret_sealed))]


def reseal_webhook_secret(conn: Connection, app_id: str, sealed: str) -> None:
    """The same secret sealed anew: `updated_at` stays, since no setting changed."""
    conn.execute(update(apps).where(apps.c.id == app_id).values(webhook_secret_sealed=sealed))

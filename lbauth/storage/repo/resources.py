"""Protected resources (RFC 8707, contract 17), registered by the operator and matched by their
normalised URI."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, insert, select

from lbauth.storage.models import resources
from lbauth.storage.records import Resource
from lbauth.storage.repo import duplicate_refused, shaped

_ALL = shaped(Resource, select(resources))


def insert_resource(conn: Connection, *, uri: str, normalized: str, name: str, scopes: list[str] | None,
                    now: int) -> None:
    """Raises Duplicate when the URI, or another of the same normalised form, is registered."""
    with duplicate_refused("resource"):
        conn.execute(insert(resources).values(uri=uri, normalized=normalized, name=name, scopes=scopes,
                                              created_at=now))


def by_normalized(conn: Connection, normalized: Sequence[str]) -> list[Resource]:
    """The resources whose normalised URI is among `normalized` (one statement)."""
    rows = conn.execute(_ALL.where(resources.c.normalized.in_(list(normalized))))
    return [Resource(*row) for row in rows]


def all_resources(conn: Connection) -> list[Resource]:
    return [Resource(*row) for row in conn.execute(_ALL.order_by(resources.c.created_at, resources.c.uri))]


def delete_by_normalized(conn: Connection, normalized: str) -> Resource | None:
    """Remove the resource of this normalised URI: what it was, or None."""
    row = conn.execute(delete(resources).where(resources.c.normalized == normalized)
                       .returning(*resources.c)).first()
    return Resource(*row) if row is not None else None

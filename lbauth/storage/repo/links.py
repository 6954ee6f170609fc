"""The tokens of emailed links (contract 18), by digest."""

from __future__ import annotations

from dataclasses import fields

from sqlalchemy import Connection, delete, insert, select, update

from lbauth.storage.models import link_tokens
from lbauth.storage.records import LinkToken
from lbauth.storage.repo import shaped

_ALL = shaped(LinkToken, select(link_tokens))


def insert_link(conn: Connection, token: LinkToken) -> None:
    conn.execute(insert(link_tokens).values({f.name: getattr(token, f.name) for f in fields(token)}))


def by_hash(conn: Connection, token_hash: str) -> LinkToken | None:
    row = conn.execute(_ALL.where(link_tokens.c.token_hash == token_hash)).first()
    return LinkToken(*row) if row is not None else None


def use(conn: Connection, token_hash: str, now: int) -> bool:
    """Mark a live token used; False when it was used, voided or expired meanwhile (a race lost)."""
    return conn.execute(update(link_tokens)
                        .where(link_tokens.c.token_hash == token_hash, link_tokens.c.used_at.is_(None),
                               link_tokens.c.expires_at > now)
                        .values(used_at=now)).rowcount == 1


def void_unused(conn: Connection, user_id: str, kind: str, now: int) -> int:
    """A newer link voids the older ones of the same kind (contract 18: a new reset request)."""
    return conn.execute(update(link_tokens)
                        .where(link_tokens.c.user_id == user_id, link_tokens.c.kind == kind,
                               link_tokens.c.used_at.is_(None))
                        .values(used_at=now)).rowcount


def delete_expired(conn: Connection, before: int) -> int:
    return conn.execute(delete(link_tokens).where(link_tokens.c.expires_at < before)).rowcount


def sealed_payloads(conn: Connection) -> list[tuple[str, str]]:
    """(token digest, sealed payload) of every link that has one: master key rotation."""
    query = (select(link_tokens.c.token_hash, link_tokens.c.payload_sealed)
             .where(link_tokens.c.payload_sealed.is_not(None)))
    return [(token_hash, sealed) for token_hash, sealed in conn.execute(query)]


def reseal_payload(conn: Connection, token_hash: str, sealed: str) -> None:
    conn.execute(update(link_tokens).where(link_tokens.c.token_hash == token_hash).values(payload_sealed=sealed))

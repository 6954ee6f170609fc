"""Signing keys (contract section 8): staged -> active -> retiring -> retired."""

from __future__ import annotations

from dataclasses import fields

from sqlalchemy import Connection, insert, select, update

from lbauth.storage.models import signing_keys
from lbauth.storage.records import KeyRole, SigningKey
from lbauth.storage.repo import duplicate_refused, shaped

PUBLISHED_STATES = ("staged", "active", "retiring")
_ALL = shaped(SigningKey, select(signing_keys).order_by(signing_keys.c.created_at))


def insert_key(conn: Connection, key: SigningKey) -> None:
    """Raises Duplicate for a second active key of an algorithm or for access tokens (the schema
    allows one) or a kid already stored."""
    with duplicate_refused("signing key"):
        conn.execute(insert(signing_keys).values({f.name: getattr(key, f.name) for f in fields(key)}))


def published(conn: Connection) -> list[SigningKey]:
    """Every key that may still verify a live token, the signing key first."""
    keys = [SigningKey(*row) for row in conn.execute(_ALL.where(signing_keys.c.state.in_(PUBLISHED_STATES)))]
    return sorted(keys, key=lambda k: (k.state != "active", k.created_at))


def all_keys(conn: Connection) -> list[SigningKey]:
    return [SigningKey(*row) for row in conn.execute(_ALL)]


def activate(conn: Connection, kid: str, now: int) -> None:
    conn.execute(update(signing_keys).where(signing_keys.c.kid == kid)
                 .values(state="active", activated_at=now, deactivated_at=None))


def set_role(conn: Connection, kid: str, role: KeyRole) -> None:
    conn.execute(update(signing_keys).where(signing_keys.c.kid == kid).values(role=role.value))


def deactivate(conn: Connection, kid: str, now: int) -> None:
    """The active key stops signing: `retiring`, still published."""
    conn.execute(update(signing_keys).where(signing_keys.c.kid == kid)
                 .values(state="retiring", deactivated_at=now))


def retire(conn: Connection, kid: str, now: int) -> None:
    conn.execute(update(signing_keys).where(signing_keys.c.kid == kid).values(state="retired", retired_at=now))


def private_keys(conn: Connection) -> list[tuple[str, str]]:
    """(kid, sealed private key) of every key, for master key rotation (core/crypto/reseal.py)."""
    return [(kid, sealed) for kid, sealed in
            conn.execute(select(signing_keys.c.kid, signing_keys.c.private_key_sealed))]


def reseal_private_key(conn: Connection, kid: str, sealed: str) -> None:
    conn.execute(update(signing_keys).where(signing_keys.c.kid == kid).values(private_key_sealed=sealed))

"""DPoP proofs seen (RFC 9449 11.1): each proof's key and `jti`, by digest, until it is too old to
be accepted anyway."""

from __future__ import annotations

from sqlalchemy import Connection, delete
from sqlalchemy.dialects import postgresql, sqlite

from lbauth.storage import Duplicate
from lbauth.storage.models import dpop_proofs
from lbauth.storage.records import ProvenKey

# Built once per dialect (see repo/codes.py): an insert that skips a proof already there.
_REMEMBER = {"postgresql": postgresql.insert(dpop_proofs).on_conflict_do_nothing(index_elements=["proof_hash"]),
             "sqlite": sqlite.insert(dpop_proofs).on_conflict_do_nothing(index_elements=["proof_hash"])}


def first_use(conn: Connection, proof_hash: str, *, expires_at: int) -> bool:
    """Remember a proof, in one statement; False when any process saw it before."""
    result = conn.execute(_REMEMBER[conn.dialect.name], {"proof_hash": proof_hash, "expires_at": expires_at})
    return result.rowcount == 1


def spend(conn: Connection, proof: ProvenKey) -> None:
    """Record the proof's use, or raise Duplicate if any process recorded it before."""
    if not first_use(conn, proof.proof_hash, expires_at=proof.remember_until):
        raise Duplicate("DPoP proof")


def delete_ended(conn: Connection, before: int) -> int:
    return conn.execute(delete(dpop_proofs).where(dpop_proofs.c.expires_at < before)).rowcount

"""Signing keys (contract section 8): kept in the database with the private part sealed under the
master key, loaded once into a `KeyRing` of ready key objects ({kid: key}), published as JWKS.

Lifecycle: `staged` (published, not signing) -> `active` (signing; exactly one) -> `retiring`
(published, no longer signing) -> `retired` (gone from JWKS once no token it signed can be live).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from sqlalchemy import Row
from sqlalchemy.exc import IntegrityError

from lbauth.clock import Clock, iso
from lbauth.core.masterkey import MasterKeys
from lbauth.settings import SIGNING_ALGS
from lbauth.storage.db import Database
from lbauth.storage.repo import keys as repo

_JWK_CODEC = {"ES256": ECAlgorithm, "RS256": RSAAlgorithm, "EdDSA": OKPAlgorithm}
# RFC 7638 3.2: the required members of each key type, in lexicographic order.
_THUMBPRINT_MEMBERS = {"EC": ("crv", "kty", "x", "y"), "RSA": ("e", "kty", "n"), "OKP": ("crv", "kty", "x")}


def generate_private_key(alg: str) -> Any:
    if alg == "ES256":
        return ec.generate_private_key(ec.SECP256R1())
    if alg == "RS256":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    if alg == "EdDSA":
        return ed25519.Ed25519PrivateKey.generate()
    raise ValueError(f"unsupported signing algorithm {alg!r}; use one of {', '.join(SIGNING_ALGS)}")


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638 JWK thumbprint (SHA-256, base64url): the key's id."""
    members = {name: jwk[name] for name in _THUMBPRINT_MEMBERS[jwk["kty"]]}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True).encode()
    return base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=").decode()


def public_jwk(alg: str, public_key: Any) -> dict[str, Any]:
    jwk = _JWK_CODEC[alg].to_jwk(public_key, as_dict=True)
    jwk = {k: v for k, v in jwk.items() if k in ("kty", "crv", "x", "y", "n", "e")}
    return {**jwk, "kid": thumbprint(jwk), "alg": alg, "use": "sig"}


def _purpose(kid: str) -> str:
    return f"signing_key:{kid}"


@dataclass(frozen=True)
class Signer:
    kid: str
    alg: str
    private_key: Any = field(repr=False)


@dataclass(frozen=True)
class KeyRing:
    """The keys one process signs and verifies with, built once per change of the key table."""
    signer: Signer | None
    public_keys: dict[str, tuple[str, Any]]  # kid -> (alg, public key object)
    jwks: dict[str, Any]
    version: tuple[tuple[str, str], ...]  # (kid, state) pairs: a change means reload

    @classmethod
    def build(cls, rows: list[Row], master_keys: MasterKeys) -> KeyRing:
        signer = None
        public_keys: dict[str, tuple[str, Any]] = {}
        for row in rows:
            public_keys[row.kid] = (row.alg, _JWK_CODEC[row.alg].from_jwk(row.public_jwk))
            if row.state == "active":
                pem = master_keys.open(row.private_key_sealed, _purpose(row.kid))
                signer = Signer(row.kid, row.alg, serialization.load_pem_private_key(pem, password=None))
        jwks = {"keys": [dict(row.public_jwk) for row in rows]}
        return cls(signer, public_keys, jwks, tuple((row.kid, row.state) for row in rows))


def _new_key_row(alg: str, state: str, master_keys: MasterKeys, now: int) -> dict[str, Any]:
    private_key = generate_private_key(alg)
    jwk = public_jwk(alg, private_key.public_key())
    pem = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return dict(kid=jwk["kid"], alg=alg, state=state, public_jwk=jwk,
                private_key_sealed=master_keys.seal(pem, _purpose(jwk["kid"])), created_at=now,
                activated_at=now if state == "active" else None)


async def ensure_active_key(db: Database, clock: Clock, master_keys: MasterKeys, alg: str) -> bool:
    """Make the first signing key if there is none; True if one was made. Safe when several
    processes start at once: the schema allows only one active key."""
    def has_active(conn) -> bool:
        return any(row.state == "active" for row in repo.published(conn))

    if await db.read(has_active):
        return False
    row = _new_key_row(alg, "active", master_keys, int(clock.now()))  # key generation: outside the transaction

    def work(conn) -> bool:
        if has_active(conn):
            return False
        repo.insert_key(conn, **row)
        return True
    try:
        return await db.transaction(work)
    except IntegrityError:
        return False


async def load_keyring(db: Database, master_keys: MasterKeys) -> KeyRing:
    return KeyRing.build(await db.read(repo.published), master_keys)


def key_view(row: Row) -> dict[str, Any]:
    return {"kid": row.kid, "alg": row.alg, "state": row.state, "createdAt": iso(row.created_at),
            "activatedAt": iso(row.activated_at), "deactivatedAt": iso(row.deactivated_at),
            "retiredAt": iso(row.retired_at)}


async def list_keys(db: Database) -> list[dict[str, Any]]:
    return [key_view(row) for row in await db.read(repo.all_keys)]

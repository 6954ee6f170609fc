"""Signing keys (contract section 8): kept in the database with the private part sealed under the
master key, loaded once into a `KeyRing` of ready key objects ({kid: key}), published as JWKS.

Lifecycle: `staged` (published, not signing) -> `active` (signing; one per algorithm) -> `retiring`
(published, no longer signing) -> `retired` (gone from JWKS once no token it signed can be live).

The ring holds one active key per algorithm in use (contract 8). One of them has the access-token
role (KeyRole) and signs access tokens: the first start makes it with LBAUTH_SIGNING_ALG. Each
algorithm apps choose for their ID tokens (RS256 unless an app chose ES256 or EdDSA; an RS256 key
exists from the first start) has its key for those. Rotation works per algorithm, and never moves
the access-token role to another algorithm unless LBAUTH_SIGNING_ALG names it (see `promote_key`).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm, get_default_algorithms

from lbauth.clock import Clock, iso
from lbauth.core import audit
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.settings import SIGNING_ALGS
from lbauth.storage import Connection, Duplicate
from lbauth.storage.db import Database
from lbauth.storage.records import KeyRole, SigningKey
from lbauth.storage.repo import keys as repo

ID_TOKEN_DEFAULT_ALG = "RS256"  # noqa: S105 - an algorithm's name (contract 15)
_JWK_CODEC: dict[str, Any] = {"ES256": ECAlgorithm, "RS256": RSAAlgorithm, "EdDSA": OKPAlgorithm}
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


def signing_key_purpose(kid: str) -> str:
    return f"signing_key:{kid}"


@dataclass(frozen=True)
class Signer:
    kid: str
    alg: str
    private_key: Any = field(repr=False)

    def sign(self, claims: dict[str, Any], typ: str) -> str:
        """A compact JWS of `claims` (RFC 7515 7.1) with headers alg, kid and typ: what `jwt.encode`
        makes, byte for byte, without re-checking on every token a key that is ours and ready."""
        signing_input = _jws_header(self.alg, self.kid, typ) + b"." + _b64(
            json.dumps(claims, separators=(",", ":")).encode())
        return (signing_input + b"." + _b64(_ALGORITHMS[self.alg].sign(signing_input, self.private_key))).decode()


_ALGORITHMS = get_default_algorithms()


def _b64(data: bytes) -> bytes:
    return base64.urlsafe_b64encode(data).rstrip(b"=")


@functools.lru_cache(maxsize=16)
def _jws_header(alg: str, kid: str, typ: str) -> bytes:
    return _b64(json.dumps({"alg": alg, "kid": kid, "typ": typ}, separators=(",", ":"), sort_keys=True).encode())


@dataclass(frozen=True)
class KeyRing:
    """The keys one process signs and verifies with, built once per change of the key table."""
    signers: dict[str, Signer]  # alg -> its active key
    access_alg: str | None  # the algorithm of the key with the access-token role (None: no such key yet)
    public_keys: dict[str, tuple[str, Any]]  # kid -> (alg, public key object)
    jwks: dict[str, Any]
    version: tuple[tuple[str, str, str], ...]  # (kid, state, role): a change means reload

    @property
    def signer(self) -> Signer | None:
        """The access-token key."""
        return self.signers.get(self.access_alg) if self.access_alg else None

    @classmethod
    def build(cls, keys: list[SigningKey], master_keys: MasterKeys) -> KeyRing:
        """Access tokens are signed by the active key with the access-token role, whatever
        LBAUTH_SIGNING_ALG says now (`lbauth serve` says so when they differ: contract 8)."""
        signers: dict[str, Signer] = {}
        public_keys: dict[str, tuple[str, Any]] = {}
        access_alg = None
        for key in keys:
            public_keys[key.kid] = (key.alg, _JWK_CODEC[key.alg].from_jwk(key.public_jwk))
            if key.state == "active":
                pem = master_keys.open(key.private_key_sealed, signing_key_purpose(key.kid))
                # The key was made here and comes out of authenticated encryption: RSA's consistency
                # check (most of a start's key loading) would only repeat what generation proved.
                private_key = serialization.load_pem_private_key(pem, password=None,
                                                                 unsafe_skip_rsa_key_validation=True)
                signers[key.alg] = Signer(key.kid, key.alg, private_key)
                if key.role == KeyRole.ACCESS_TOKENS:
                    access_alg = key.alg
        jwks = {"keys": [dict(key.public_jwk) for key in keys]}
        return cls(signers, access_alg, public_keys, jwks, cls.version_of(keys))

    @staticmethod
    def version_of(keys: list[SigningKey]) -> tuple[tuple[str, str, str], ...]:
        """What tells two rings apart: each key's id, state and role."""
        return tuple((key.kid, key.state, key.role) for key in keys)


def _new_key(alg: str, state: str, master_keys: MasterKeys, now: int,
             role: KeyRole = KeyRole.ID_TOKENS) -> SigningKey:
    private_key = generate_private_key(alg)
    jwk = public_jwk(alg, private_key.public_key())
    pem = private_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption())
    return SigningKey(kid=jwk["kid"], alg=alg, state=state, public_jwk=jwk,
                      private_key_sealed=master_keys.seal(pem, signing_key_purpose(jwk["kid"])), created_at=now,
                      activated_at=now if state == "active" else None, deactivated_at=None, retired_at=None,
                      role=role.value)


def _active(conn: Connection) -> list[SigningKey]:
    return [key for key in repo.published(conn) if key.state == "active"]


async def ensure_active_key(db: Database, clock: Clock, master_keys: MasterKeys, alg: str, *,
                            role: KeyRole = KeyRole.ID_TOKENS) -> bool:
    """Make an active key of `alg` if there is none; True if one was made. For the access-token
    `role`: only if no active key has that role yet, and an active key of `alg` takes the role
    rather than a second being made. Safe when several processes start at once: the schema allows
    one active key per algorithm, and one with the access-token role."""
    def missing(conn: Connection) -> bool:
        active = _active(conn)
        if role == KeyRole.ACCESS_TOKENS:
            return not any(key.role == role for key in active)
        return not any(key.alg == alg for key in active)

    if not await db.read(missing):
        return False
    key = _new_key(alg, "active", master_keys, int(clock.now()), role)  # key generation: outside the transaction

    def work(conn: Connection) -> bool:
        if not missing(conn):
            return False
        same_alg = next((k for k in _active(conn) if k.alg == alg), None)
        if same_alg is not None:  # only for the access-token role: ID tokens of `alg` have their key
            repo.set_role(conn, same_alg.kid, role)
            return False
        repo.insert_key(conn, key)
        return True
    try:
        return await db.transaction(work)
    except Duplicate:
        return False


async def ensure_keys(db: Database, clock: Clock, master_keys: MasterKeys, access_alg: str) -> None:
    """At start: the access-token key (LBAUTH_SIGNING_ALG's, on a new database) and an RS256 key,
    the ID tokens' default (contract 8)."""
    await ensure_active_key(db, clock, master_keys, access_alg, role=KeyRole.ACCESS_TOKENS)
    await ensure_active_key(db, clock, master_keys, ID_TOKEN_DEFAULT_ALG)


async def load_keyring(db: Database, master_keys: MasterKeys, current: KeyRing | None = None) -> KeyRing:
    """The published keys' ring; `current` itself when no key was added, changed state or role
    (opening sealed keys and parsing them is most of a reload's cost, and servers reload every
    few seconds)."""
    keys = await db.read(repo.published)
    if current is not None and current.version == KeyRing.version_of(keys):
        return current
    return KeyRing.build(keys, master_keys)


def key_view(key: SigningKey) -> dict[str, Any]:
    return {"kid": key.kid, "alg": key.alg, "state": key.state, "createdAt": iso(key.created_at),
            "activatedAt": iso(key.activated_at), "deactivatedAt": iso(key.deactivated_at),
            "retiredAt": iso(key.retired_at)}


async def list_keys(db: Database) -> list[dict[str, Any]]:
    return [key_view(key) for key in await db.read(repo.all_keys)]


# ---- rotation (contract section 8; tools/rotate_signing_key.py) -------------------------------------------

# Verifiers may cache the JWKS this long (its Cache-Control max-age, and lbauth.verify's default
# refresh), and server processes reload keys every few seconds: a staged key must have been
# published this long before it may sign.
DEFAULT_GRACE_SECONDS = 900
SERVER_RELOAD_SECONDS = 5  # lbauth.server.KEY_RELOAD_SECONDS: a process may sign with the old key this long
VERIFIER_MAX_LEEWAY = 60


class RotationRefused(Exception):
    """A rotation step would make a valid token fail; the message says why and what to do."""


def _rotated(conn: Connection, now: int, actor: audit.Actor, step: str, key: SigningKey) -> None:
    audit.record(conn, now, audit.EventType.KEY_ROTATED, actor, detail={"step": step, "kid": key.kid, "alg": key.alg})


async def stage_key(db: Database, clock: Clock, master_keys: MasterKeys, alg: str,
                    actor: audit.Actor = audit.OPERATOR) -> dict[str, Any]:
    """Step 1: a new key of `alg`, published in the JWKS but not signing yet. Each step is in the
    audit log, done by `actor`."""
    key = _new_key(alg, "staged", master_keys, int(clock.now()))

    def work(conn: Connection) -> None:
        if any(k.state == "staged" and k.alg == alg for k in repo.published(conn)):
            raise RotationRefused(f"an {alg} key is already staged; promote it or retire it first")
        repo.insert_key(conn, key)
        _rotated(conn, key.created_at, actor, "stage", key)
    await db.transaction(work)
    return {"kid": key.kid, "alg": alg, "state": "staged", "createdAt": iso(key.created_at)}


def role_on_promotion(active: list[SigningKey], target: SigningKey, access_alg: str | None) -> KeyRole:
    """What `target` signs once promoted: access tokens if the key it replaces signed them, or if its
    algorithm is `access_alg` (LBAUTH_SIGNING_ALG) and the access-token key's is not (the one way
    to change the access-token algorithm: contract 8); else the ID tokens of its algorithm."""
    access = next((key for key in active if key.role == KeyRole.ACCESS_TOKENS), None)
    if access is None or target.alg in (access.alg, access_alg):
        return KeyRole.ACCESS_TOKENS
    return KeyRole.ID_TOKENS


async def promote_key(db: Database, clock: Clock, *, kid: str | None = None, alg: str | None = None,
                      grace: int = DEFAULT_GRACE_SECONDS, force: bool = False,
                      access_alg: str | None = None, actor: audit.Actor = audit.OPERATOR) -> dict[str, Any]:
    """Step 2: the staged key (or, to roll back, a retiring one) starts signing; the active key of
    its algorithm becomes `retiring`: still published, so every token it signed keeps verifying.
    With keys of several algorithms staged, `alg` or `kid` says which. `access_alg`:
    LBAUTH_SIGNING_ALG (see `role_on_promotion`)."""
    now = int(clock.now())

    def work(conn: Connection) -> dict[str, Any]:
        keys = {k.kid: k for k in repo.all_keys(conn)}
        staged = [k for k in keys.values() if k.state == "staged" and (alg is None or k.alg == alg)]
        if not kid and len(staged) > 1:
            raise RotationRefused(f"keys of {', '.join(sorted(k.alg for k in staged))} are staged; "
                                  "say which with --alg")
        target = keys.get(kid) if kid else (staged[0] if staged else None)
        if target is None or target.state not in ("staged", "retiring"):
            raise RotationRefused(("no staged key to promote (stage one first)" if alg is None
                                   else f"no staged {alg} key to promote (stage one first)") if not kid
                                  else f"key {kid} is not staged or retiring")
        published_for = now - target.created_at
        if target.state == "staged" and published_for < grace and not force:
            raise RotationRefused(
                f"key {target.kid} has been published for {published_for} s; verifiers may still hold a JWKS "
                f"without it for up to {grace} s. Wait {grace - published_for} s more, or pass --force.")
        active = [key for key in keys.values() if key.state == "active"]
        role = role_on_promotion(active, target, access_alg)
        for key in active:
            if key.alg == target.alg:
                repo.deactivate(conn, key.kid, now)
            elif role == KeyRole.ACCESS_TOKENS and key.role == role:  # it keeps signing its ID tokens
                repo.set_role(conn, key.kid, KeyRole.ID_TOKENS)
        repo.set_role(conn, target.kid, role)
        repo.activate(conn, target.kid, now)
        _rotated(conn, now, actor, "promote", target)
        return {"kid": target.kid, "alg": target.alg, "state": "active", "activatedAt": iso(now)}
    return await db.transaction(work)


def retire_after(key: SigningKey, access_ttl: int, leeway: int = VERIFIER_MAX_LEEWAY) -> int:
    """When no token this key signed can still be live anywhere: the last one was signed at most a
    reload interval after it stopped signing, lives `access_ttl` (callers pass the longest lifetime
    of what keys sign: access tokens and ID tokens), and may be accepted with the verifiers' clock
    leeway (60 s at most with lbauth.verify)."""
    return (key.deactivated_at or 0) + SERVER_RELOAD_SECONDS + access_ttl + leeway


async def rotation_status(db: Database, clock: Clock, *, access_ttl: int, grace: int = DEFAULT_GRACE_SECONDS,
                          leeway: int = VERIFIER_MAX_LEEWAY) -> list[dict[str, Any]]:
    """Every key, and in how many seconds its next rotation step becomes safe."""
    now = int(clock.now())
    out = []
    for key in await db.read(repo.all_keys):
        item = key_view(key)
        if key.state == "staged":
            item["promotableIn"] = max(0, key.created_at + grace - now)
        elif key.state == "retiring":
            item["retirableIn"] = max(0, retire_after(key, access_ttl, leeway) - now)
        out.append(item)
    return out


async def retire_keys(db: Database, clock: Clock, *, access_ttl: int, kid: str | None = None,
                      leeway: int = VERIFIER_MAX_LEEWAY, force: bool = False,
                      actor: audit.Actor = audit.OPERATOR) -> list[dict[str, Any]]:
    """Step 3: drop retiring keys from the JWKS once nothing they signed can be live."""
    now = int(clock.now())

    def work(conn: Connection) -> list[dict[str, Any]]:
        stored = repo.all_keys(conn)
        candidates = [k for k in stored if k.state == "retiring" and (kid is None or k.kid == kid)]
        # A staged key never signed anything: withdrawing it (by its kid) is always safe.
        candidates += [k for k in stored if k.state == "staged" and kid is not None and k.kid == kid]
        if kid and not candidates:
            raise RotationRefused(f"key {kid} is not staged or retiring")
        retired = []
        for key in candidates:
            safe_at = retire_after(key, access_ttl, leeway) if key.state == "retiring" else now
            if now < safe_at and not force:
                raise RotationRefused(
                    f"key {key.kid} stopped signing at {iso(key.deactivated_at)}; tokens it signed may be live "
                    f"until {iso(safe_at)}. Wait {safe_at - now} s more, or pass --force.")
            repo.retire(conn, key.kid, now)
            _rotated(conn, now, actor, "retire", key)
            retired.append({"kid": key.kid, "state": "retired", "retiredAt": iso(now)})
        return retired
    return await db.transaction(work)

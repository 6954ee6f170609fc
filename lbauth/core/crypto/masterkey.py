"""Secrets at rest (contract sections 6 and 8): AES-256-GCM under a list of master keys.

The first key encrypts, every key decrypts, so a rotation re-encrypts under a new first key and
then retires the old one. A sealed value reads `mk1.<key id>.<base64url(nonce || ciphertext)>`;
the key id lets rotation find every value still sealed under an old key. Each value is bound to
its purpose (associated data), so a ciphertext copied into another row does not open there.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import secrets
from collections.abc import Collection, Iterable
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from lbauth.settings import Settings, SettingsError

_PREFIX = "mk1"
REMEDY = "set LBAUTH_MASTER_KEY to the same list on every server of the deployment"
NEW_KEY_COMMAND = "lbauth keys new-master-key"

log = logging.getLogger("lbauth.masterkey")


class MasterKeyError(Exception):
    """A sealed value cannot be opened with any configured master key."""


class MissingMasterKey(MasterKeyError):
    """Values are sealed under master keys this process does not have (contract 8): the message
    names their ids and the remedy, one line, no key material."""

    def __init__(self, missing: Iterable[str], configured: Iterable[str] = ()) -> None:
        self.missing = tuple(sorted(set(missing)))
        configured = tuple(configured)
        which = ("master key " if len(self.missing) == 1 else "master keys ") + ", ".join(self.missing)
        have = f"this server has {', '.join(configured)}" if configured else "this server has none"
        super().__init__(f"the database holds secrets sealed with {which}, which is not configured here ({have}); "
                         f"{REMEDY}")


def require_keys(sealed_ids: Iterable[str], keys: MasterKeys) -> None:
    """MissingMasterKey unless every key id that seals a stored value is configured."""
    missing = set(sealed_ids) - set(keys.ids)
    if missing:
        raise MissingMasterKey(missing, keys.ids)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def key_id(key: bytes) -> str:
    return hashlib.sha256(b"lbauth master key id\0" + key).hexdigest()[:12]


def generate_key_text() -> str:
    """A new master key as it is written in LBAUTH_MASTER_KEY or the key file."""
    return _b64(secrets.token_bytes(32))


class MasterKeys:
    def __init__(self, keys: list[bytes]) -> None:
        if not keys:
            raise ValueError("at least one master key is needed")
        self._keys = {key_id(k): AESGCM(k) for k in keys}
        self._raw = {key_id(k): k for k in keys}
        self.primary_id = key_id(keys[0])
        self.ids = tuple(self._keys)

    @classmethod
    def parse(cls, text: str, source: str) -> MasterKeys:
        """Keys separated by commas or newlines, each 32 bytes in base64url."""
        keys = []
        for item in text.replace("\n", ",").split(","):
            item = item.strip()
            if not item or item.startswith("#"):
                continue
            try:
                key = _unb64(item)
            except ValueError:
                key = b""
            if len(key) != 32:
                raise SettingsError(f"{source}: each master key must be 32 random bytes in base64url "
                                    f"(make one with: {NEW_KEY_COMMAND})")
            keys.append(key)
        if not keys:
            raise SettingsError(f"{source}: no master key found")
        return cls(keys)

    def seal(self, plaintext: bytes, purpose: str) -> str:
        nonce = os.urandom(12)
        ciphertext = self._keys[self.primary_id].encrypt(nonce, plaintext, purpose.encode())
        return f"{_PREFIX}.{self.primary_id}.{_b64(nonce + ciphertext)}"

    def open(self, sealed: str, purpose: str) -> bytes:
        prefix, kid, data = (sealed.split(".", 2) + ["", ""])[:3]
        if prefix != _PREFIX or not kid or not data:
            raise MasterKeyError("not a sealed value")
        aead = self._keys.get(kid)
        if aead is None:
            raise MissingMasterKey([kid], self.ids)
        raw = _unb64(data)
        try:
            return aead.decrypt(raw[:12], raw[12:], purpose.encode())
        except InvalidTag:
            raise MasterKeyError("sealed value does not authenticate") from None

    def derive(self, purpose: str, kid: str | None = None) -> bytes:
        """A 32-byte key for `purpose`, derived from one master key (the first by default) with
        HKDF (RFC 5869)."""
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                    info=b"lbauth:" + purpose.encode()).derive(self._raw[kid or self.primary_id])

    def versioned(self, purpose: str) -> tuple[dict[int, str], int]:
        """Keys derived from every master key, by a numeric version, and the version to sign with:
        what Tornado's `cookie_secret` and `key_version` settings take, so a session signed under
        one master key still verifies while the list is rotated."""
        secrets_by_version = {int(kid[:8], 16): self.derive(purpose, kid).hex() for kid in self.ids}
        return secrets_by_version, int(self.primary_id[:8], 16)

    @staticmethod
    def sealed_key_id(sealed: str) -> str:
        return sealed.split(".", 2)[1]


def key_file(settings: Settings) -> Path:
    return settings.data_dir / "master.key"


def read_key_file(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().replace(",", "\n").splitlines()
            if line.strip() and not line.strip().startswith("#")]


def write_key_file(path: Path, key_texts: list[str]) -> None:
    """Replace the key file atomically, keeping it private (0600)."""
    MasterKeys.parse(",".join(key_texts), str(path))  # never write a file that would not load
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(key_texts) + "\n")
    os.replace(tmp, path)


def load_master_keys(settings: Settings, sealed_ids: Collection[str] = ()) -> MasterKeys:
    """LBAUTH_MASTER_KEY if set; else the data dir's key file, generated once with mode 0600.

    `sealed_ids` are the key ids the database already seals values with: when there are any, a new
    key could open none of them (a second server with its own data dir, contract 8), so none is
    generated and MissingMasterKey names the ids instead."""
    if settings.master_key:
        return MasterKeys.parse(settings.master_key, "master key (LBAUTH_MASTER_KEY or master_key)")
    path = key_file(settings)
    if not path.exists():
        if sealed_ids:
            raise MissingMasterKey(sealed_ids)
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            pass
        else:
            text = generate_key_text()
            with os.fdopen(fd, "w") as fh:
                fh.write(text + "\n")
            _announce_new_key(settings, path, key_id(_unb64(text)))
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(f"master key file {str(path)!r}: {exc.strerror}") from None
    return MasterKeys.parse(text, f"master key file {str(path)!r}")


def _announce_new_key(settings: Settings, path: Path, kid: str) -> None:
    """A generated key is never silent: `lbauth serve` logs it (info, its default level). On
    PostgreSQL several servers may share the database, and each must have this same key before it
    starts (contract 8)."""
    if settings.is_sqlite:
        log.info("generated master key %s into %s", kid, path)
    else:
        log.info("generated master key %s into %s; every other server of this deployment needs this same key: "
                 "copy the file to its data dir, or %s", kid, path, REMEDY)

"""Secrets at rest (contract sections 6 and 8): AES-256-GCM under a list of master keys.

The first key encrypts, every key decrypts, so a rotation re-encrypts under a new first key and
then retires the old one. A sealed value reads `mk1.<key id>.<base64url(nonce || ciphertext)>`;
the key id lets rotation find every value still sealed under an old key. Each value is bound to
its purpose (associated data), so a ciphertext copied into another row does not open there.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from lbauth.settings import Settings, SettingsError

_PREFIX = "mk1"


class MasterKeyError(Exception):
    """A sealed value cannot be opened with any configured master key."""


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
                raise SettingsError(f"{source}: each master key must be 32 random bytes in base64url (make one "
                                    "with: python3 -c 'import base64,os; print(base64.urlsafe_b64encode("
                                    "os.urandom(32)).decode())')")
            keys.append(key)
        if not keys:
            raise SettingsError(f"{source}: no master key found")
        return cls(keys)

    def seal(self, plaintext: bytes, purpose: str) -> str:
        nonce = os.urandom(12)
        ciphertext = self._keys[self.primary_id].encrypt(nonce, plaintext, purpose.encode())
        return f"{_PREFIX}.{self.primary_id}.{_b64(nonce + ciphertext)}"

    def open(self, sealed: str, purpose: str) -> bytes:
        try:
            prefix, kid, data = sealed.split(".", 2)
            aead = self._keys[kid] if prefix == _PREFIX else None
        except (ValueError, KeyError):
            aead = None
        if aead is None:
            raise MasterKeyError("sealed with a master key that is not configured")
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


def load_master_keys(settings: Settings) -> MasterKeys:
    """LBAUTH_MASTER_KEY if set; else the data dir's key file, generated once with mode 0600."""
    if settings.master_key:
        return MasterKeys.parse(settings.master_key, "master key (LBAUTH_MASTER_KEY or master_key)")
    path = key_file(settings)
    if not path.exists():
        settings.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process made it first
            pass
        else:
            with os.fdopen(fd, "w") as fh:
                fh.write(generate_key_text() + "\n")
    try:
        text = path.read_text()
    except OSError as exc:
        raise SettingsError(f"master key file {str(path)!r}: {exc.strerror}") from None
    return MasterKeys.parse(text, f"master key file {str(path)!r}")

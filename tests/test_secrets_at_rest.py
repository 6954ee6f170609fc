"""Secrets at rest (contract sections 6 and 8): after users, apps and tokens are created, no raw
database row holds a plaintext client secret, webhook secret, password, token or private key."""

from __future__ import annotations

import hashlib
import os
import stat

import pytest
from sqlalchemy import inspect, text

from lbauth.core.crypto.masterkey import MasterKeyError, MasterKeys, generate_key_text, key_file
from lbauth.settings import SettingsError
from tests.conftest import start_server


async def _all_cells(db) -> list[str]:
    def work(conn):
        cells = []
        for table in inspect(conn).get_table_names():
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                cells.extend(str(value) for value in row)
        return cells
    return await db.read(work)


async def test_no_plaintext_secret_in_any_row(server):
    user = await server.create_user(password="plain-password-123")
    token = await server.login(user["email"], "plain-password-123")
    app = await server.create_app(user["email"], webhook_url="https://hooks.example/lbauth")

    cells = await _all_cells(server.db)
    blob = "\n".join(cells)
    for secret in ("plain-password-123", token, app["clientSecret"], app["webhookSecret"]):
        assert secret not in blob
        assert secret[7:] not in blob  # not even without its prefix
    # What is stored instead: digests of the token and client secret, argon2id for the password,
    # a sealed webhook secret and a sealed private key.
    assert hashlib.sha256(token.encode()).hexdigest() in cells
    assert hashlib.sha256(app["clientSecret"].encode()).hexdigest() in cells
    assert any(cell.startswith("$argon2id$") for cell in cells)
    assert "PRIVATE KEY" not in blob
    sealed = [cell for cell in cells if cell.startswith("mk1.")]
    assert len(sealed) == 2  # the webhook secret and the signing key


async def test_sealed_secrets_open_only_with_the_master_key(server):
    user = await server.create_user()
    app = await server.create_app(user["email"])
    row = await server.db.read(lambda c: c.execute(text("SELECT id, webhook_secret_sealed FROM apps")).one())
    keys = server.services.master_keys
    assert keys.open(row.webhook_secret_sealed, f"webhook_secret:{row.id}").decode() == app["webhookSecret"]
    other = MasterKeys.parse(generate_key_text(), "test")
    try:
        other.open(row.webhook_secret_sealed, f"webhook_secret:{row.id}")
        raise AssertionError("opened under another master key")
    except Exception as exc:  # noqa: BLE001
        assert isinstance(exc, MasterKeyError), exc
    # Bound to its row: the same ciphertext does not open as another app's secret.
    try:
        keys.open(row.webhook_secret_sealed, "webhook_secret:app_other")
        raise AssertionError("opened for another purpose")
    except Exception as exc:  # noqa: BLE001
        assert isinstance(exc, MasterKeyError), exc


async def test_generated_master_key_file_is_private(server):
    path = key_file(server.settings)
    assert path.exists()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_new_sqlite_database_file_is_private(tmp_path, backend):
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh' / 'lbauth.db'}"
    srv = await start_server(tmp_path, url)
    try:
        assert stat.S_IMODE(os.stat(tmp_path / "fresh" / "lbauth.db").st_mode) == 0o600
        assert stat.S_IMODE(os.stat(tmp_path / "fresh").st_mode) == 0o700
    finally:
        srv.client.close()
        await srv.running.stop()


def test_master_key_list_first_encrypts_all_decrypt():
    old, new = generate_key_text(), generate_key_text()
    before = MasterKeys.parse(old, "env").seal(b"value", "p")
    rotated = MasterKeys.parse(f"{new},{old}", "env")
    assert rotated.open(before, "p") == b"value"
    after = rotated.seal(b"value", "p")
    assert MasterKeys.sealed_key_id(after) == rotated.primary_id != MasterKeys.sealed_key_id(before)
    try:
        MasterKeys.parse("not-a-key", "LBAUTH_MASTER_KEY")
        raise AssertionError("accepted a short key")
    except SettingsError as exc:
        assert str(exc).startswith("LBAUTH_MASTER_KEY:")

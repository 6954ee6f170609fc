"""Secrets at rest (contract sections 6 and 8): after users, apps and tokens are created, no raw
database row holds a plaintext client secret, webhook secret, password, token or private key.
And personal data at rest (contract 16): a deleted account's name, email, profile and password
hash leave the database's bytes within 10 s of the deletion's answer."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.engine import make_url

from lbauth.core.crypto.masterkey import MasterKeyError, MasterKeys, generate_key_text, key_file
from lbauth.settings import SettingsError
from tests.conftest import arun_cli, start_server


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
    assert len(sealed) == 3  # the webhook secret, the access-token key and the RS256 ID-token key (contract 8)


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


# ---- a deleted account leaves the bytes at rest (contract 16) -----------------------------------------------

ERASED_WITHIN = 10  # seconds after the deletion's answer


async def _bytes_at_rest(server, database_url: str, backend: str) -> bytes:
    """What an attacker with the disk (or a backup) would read: on SQLite the database file and its
    write-ahead log, raw; on PostgreSQL a `pg_dump` of the database (every live row), or, where the
    PostgreSQL client tools are not installed, every row of every table read with SQL."""
    if backend == "sqlite":
        path = Path(make_url(database_url).database)
        return b"".join(p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists())
    if shutil.which("pg_dump") is None:
        return "\n".join(await _all_cells(server.db)).encode()
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(hide_password=False)
    dump = await asyncio.to_thread(subprocess.run, ["pg_dump", "--no-owner", dsn], capture_output=True, timeout=60)
    assert dump.returncode == 0, dump.stderr.decode(errors="replace")
    return dump.stdout


async def test_a_deleted_users_personal_data_leaves_the_bytes_at_rest_within_10_seconds(server, database_url,
                                                                                     backend):
    mark = secrets.token_hex(6)
    user = await server.create_user(email=f"erasable.{mark}@example.com", name=f"Erasable Person {mark}",
                                    bio=f"bio of {mark}", avatar=f"https://img.example/{mark}.png",
                                    interest_tags=[f"tag{mark}"])
    token = await server.login(user["email"], user["password"])
    # Personal data written more than once: an earlier name, a session with the browser's user agent.
    r = await server.client.request("PATCH", "/api/account/profile", json_body={"name": f"Renamed Person {mark}"},
                                    bearer=token)
    assert r.status == 200, r.text
    agent = await server.client.post("/api/auth/login", json={"email": user["email"], "password": user["password"]},
                                     headers={"User-Agent": f"AgentOf/{mark}"})
    assert agent.status == 200
    app = await server.create_app((await server.create_user())["email"])
    code = (await server.client.post("/api/oauth/authorize/external", bearer=token, json={
        "clientId": app["clientId"], "redirectUri": app["redirectUris"][0], "scope": ["userinfo"]})).data["code"]
    assert (await server.client.post("/api/oauth/token/code", form={
        "grant_type": "authorization_code", "code": code, "redirect_uri": app["redirectUris"][0],
        "client_id": app["clientId"], "client_secret": app["clientSecret"]})).status == 200
    password_hash = await server.db.read(lambda c: c.execute(
        text("SELECT password_hash FROM users WHERE id = :id"), {"id": user["userId"]}).scalar_one())
    needles = [value.encode() for value in (
        user["email"], f"Erasable Person {mark}", f"Renamed Person {mark}", f"bio of {mark}",
        f"https://img.example/{mark}.png", f"tag{mark}", f"AgentOf/{mark}", password_hash)]
    present = await _bytes_at_rest(server, database_url, backend)
    assert user["email"].encode() in present and f"Renamed Person {mark}".encode() in present  # the scan sees them

    r = await server.client.request("DELETE", "/api/account", json_body={"password": user["password"]},
                                    bearer=token)
    assert r.status == 200, r.text
    answered = time.monotonic()
    while True:
        at_rest = await _bytes_at_rest(server, database_url, backend)
        left = [needle.decode() for needle in needles if needle in at_rest]
        if not left:
            break
        assert time.monotonic() - answered < ERASED_WITHIN, f"still at rest {ERASED_WITHIN} s after: {left}"
        await asyncio.sleep(0.5)
    assert user["userId"].encode() in at_rest  # the row stays, with its id and times (not the person)


async def test_an_operators_deletion_leaves_the_bytes_at_rest_while_the_server_is_busy(server, database_url, backend):
    """`lbauth users delete` in its own process, while a server on the same database keeps
    answering another user's requests (readers and writers of its own): within 10 s of the
    command's answer the person is gone from the bytes at rest."""
    mark = secrets.token_hex(6)
    user = await server.create_user(email=f"operator.gone.{mark}@example.com", name=f"Operator Deleted {mark}")
    token = await server.login(user["email"], user["password"])
    r = await server.client.request("PATCH", "/api/account/profile", json_body={"bio": f"written {mark}"},
                                    bearer=token)
    assert r.status == 200, r.text
    needles = [user["email"].encode(), f"Operator Deleted {mark}".encode(), f"written {mark}".encode()]
    assert needles[0] in await _bytes_at_rest(server, database_url, backend)

    other = await server.create_user()
    busy = True

    async def keep_busy() -> None:
        other_token = await server.login(other["email"], other["password"])
        n = 0
        while busy:
            n += 1
            await server.client.request("PATCH", "/api/account/profile", json_body={"bio": f"busy {n}"},
                                        bearer=other_token)
            await server.client.get("/api/account/sessions", bearer=other_token)
    background = asyncio.ensure_future(keep_busy())
    try:
        env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(server.settings.data_dir)}
        result = await arun_cli("users", "delete", user["email"], "--json", env=env)
        assert result.returncode == 0, result.stderr
        answered = time.monotonic()
        while True:
            left = [n.decode() for n in needles if n in await _bytes_at_rest(server, database_url, backend)]
            if not left:
                break
            assert time.monotonic() - answered < ERASED_WITHIN, f"still at rest {ERASED_WITHIN} s after: {left}"
            await asyncio.sleep(0.5)
    finally:
        busy = False
        await background

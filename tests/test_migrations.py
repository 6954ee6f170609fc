"""Schema migrations (contract section 1): `lbauth db upgrade`; SQLite migrates itself on start;
`lbauth serve` refuses an out-of-date PostgreSQL schema with a clear message."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import inspect

from lbauth.storage import migrate
from lbauth.storage.db import open_database
from lbauth.storage.models import Base
from tests.conftest import run_cli, start_server


async def _tables(url: str) -> set[str]:
    db = open_database(url)
    try:
        return set(await db.read(lambda conn: inspect(conn).get_table_names()))
    finally:
        await db.close()


async def test_db_upgrade_creates_the_schema_and_is_idempotent(tmp_path, empty_database_url):
    env = {"LBAUTH_DATABASE_URL": empty_database_url, "LBAUTH_DATA_DIR": str(tmp_path)}
    first = run_cli("db", "upgrade", "--json", env=env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {"from": None, "to": migrate.head_revision()}
    assert set(Base.metadata.tables) <= await _tables(empty_database_url)
    second = run_cli("db", "upgrade", "--json", env=env)
    assert json.loads(second.stdout) == {"from": migrate.head_revision(), "to": migrate.head_revision()}


@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
async def test_serve_refuses_an_unmigrated_postgresql(tmp_path, empty_database_url):
    env = {"LBAUTH_DATABASE_URL": empty_database_url, "LBAUTH_DATA_DIR": str(tmp_path), "LBAUTH_PORT": "0",
           "LBAUTH_BASE_URL": "https://auth.example.test"}  # production: https public URLs
    result = run_cli("serve", env=env, timeout=30)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("lbauth: ") and "lbauth db upgrade" in lines[-1]
    assert "Traceback" not in result.stderr
    assert await _tables(empty_database_url) == set()  # it changed nothing


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_sqlite_migrates_itself_when_served(tmp_path, empty_database_url):
    srv = await start_server(tmp_path, empty_database_url)
    try:
        assert (await srv.client.get("/readyz")).status == 200
        assert set(Base.metadata.tables) <= await _tables(empty_database_url)
    finally:
        srv.client.close()
        await srv.running.stop()


async def test_models_and_migrations_agree(database_url):
    """The migrated schema is exactly what the models describe (no forgotten migration)."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    db = open_database(database_url)
    try:
        diff = await db.read(lambda conn: compare_metadata(
            MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata))
    finally:
        await db.close()
    assert diff == []

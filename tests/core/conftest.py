"""The core's tests run on a temporary SQLite file with the frozen clock, without HTTP."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lbauth.clock import FrozenClock
from lbauth.server import build_services
from lbauth.services import Services
from tests.conftest import START_TIME, make_settings


@pytest.fixture
def backend() -> str:
    return "sqlite"  # the HTTP tests cover PostgreSQL; these stay fast


@pytest.fixture
async def services(tmp_path: Path, database_url: str) -> AsyncIterator[Services]:
    built = await build_services(make_settings(tmp_path, database_url), FrozenClock(START_TIME), announce=False)
    try:
        yield built
    finally:
        await built.db.close()

"""What many test files need, in one place: client authentication headers, a token's claims as a
client reads them, waiting for a condition, and the external programs some tests drive (Debian's
Chromium through Playwright, Node.js with tests/package.json's packages), each skipped with its
reason when missing, or failed under CI=true.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jwt
import pytest

from tests.conftest import IN_CI, ROOT

try:
    from playwright.async_api import async_playwright
except ImportError:  # reported by require_browser(), as a skip or (CI=true) a failure
    async_playwright = None

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 10_000  # Playwright's wait for a page, a click, a selector
NODE_MODULES = ROOT / "tests" / "node_modules"


def basic_auth(client_id: str, client_secret: str) -> str:
    """An `Authorization` value for client_secret_basic: id and secret form-encoded, then base64
    (RFC 6749 2.3.1)."""
    pair = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def unverified_claims(token: str) -> dict[str, Any]:
    """A JWT's claims (an `lba_at_` access token's or an ID token's), read without verifying it:
    what a client sees; the tests that check signatures verify them with the published keys."""
    return jwt.decode(token.removeprefix("lba_at_"), options={"verify_signature": False})


async def wait_until(condition: Callable[[], Any], seconds: float, what: str = "the condition", *,
                     step: float = 0.1, since: float | None = None) -> float:
    """Poll `condition` (a function, or a coroutine function) until it is true; the seconds it took
    from `since` (a time.monotonic(); default: now), measured when the check that saw it returned.
    AssertionError naming `what` when it still does not hold after `seconds`, or held only after."""
    started = time.monotonic() if since is None else since
    while True:
        result = condition()
        if inspect.isawaitable(result):
            result = await result
        elapsed = time.monotonic() - started
        if result:
            assert elapsed < seconds, f"{what}: only after {elapsed:.2f} s, not within {seconds} s"
            return elapsed
        if elapsed >= seconds:
            raise AssertionError(f"{what}: not within {seconds} s")
        await asyncio.sleep(step)


def _missing(reason: str) -> None:
    if IN_CI:
        pytest.fail(f"CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def require_browser() -> None:
    """Playwright and Debian's Chromium, or skip (fail under CI=true)."""
    if async_playwright is None:
        _missing("the playwright package is not installed (pip install -e '.[test]')")
    elif not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        _missing(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium; "
                 "`make test` does it when run as root)")


def require_node(*packages: str) -> str:
    """The path of `node`, with `packages` installed in tests/node_modules; else skip (fail under
    CI=true)."""
    node = shutil.which("node")
    if node is None:
        _missing("node is not on PATH: this test needs Node.js 20 or later")
    for package in packages:
        if not (NODE_MODULES / package / "package.json").is_file():
            _missing(f"tests/node_modules has no {package}: run `make test`, or `npm ci` in tests/")
    assert node is not None
    return node

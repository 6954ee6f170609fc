"""lbauth servers as real child processes (`python -m lbauth serve`), for tests that need more
than one process, or a SIGKILL."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from tornado.httpclient import HTTPClientError

from tests.client import Client
from tests.conftest import ROOT, TEST_ARGON2

_PICK = random.SystemRandom()  # not the random module's state, which tests may seed alike in every worker


def _ephemeral_ports() -> range:
    """The kernel's range for port 0 and outgoing connections (Linux's default if unreadable)."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    return range(low, high + 1)


def free_port() -> int:
    """A free port for a child server, chosen below the ephemeral range: a port the kernel hands
    out (port 0, an outgoing connection) could be taken by another test between this check and the
    child's bind, and a test would then talk to someone else's server (seen once in CI)."""
    ephemeral = _ephemeral_ports()
    while True:
        port = _PICK.randrange(10000, 65536)
        if port in ephemeral:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port


class ServerProcess:
    def __init__(self, database_url: str, data_dir: Path, **settings: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LBAUTH_")}
        self.env.update(LBAUTH_DATABASE_URL=database_url, LBAUTH_DATA_DIR=str(data_dir), LBAUTH_PORT=str(self.port),
                        LBAUTH_ENV="development", LBAUTH_RATE_LIMITS="off", LBAUTH_ARGON2=TEST_ARGON2,
                        LBAUTH_LOG_LEVEL="WARNING",
                        **{f"LBAUTH_{k.upper()}": v for k, v in settings.items()})
        self.proc: subprocess.Popen | None = None
        self.argv = [sys.executable, "-m", "lbauth", "serve"]  # a test may start it through a wrapper
        self.client = Client(self.url)
        self.log = data_dir / f"server-{self.port}.log"

    async def start(self, timeout: float = 30) -> ServerProcess:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            await self._healthy(time.monotonic() + timeout)
        except BaseException:
            self.kill()  # a server that never became healthy outlives no test
            raise
        return self

    async def _healthy(self, deadline: float) -> None:
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                if (await self.client.get("/healthz", timeout=2)).status == 200:
                    return
            except (OSError, HTTPClientError):  # not listening yet, or too busy starting to answer in 2 s
                pass
            await asyncio.sleep(0.1)
        raise AssertionError("server did not become healthy")

    def kill(self) -> None:
        """SIGKILL: no shutdown code runs."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        self.client.close()

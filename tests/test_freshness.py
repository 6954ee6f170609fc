"""A process cut off from its database fails closed (issue 19, item 6; contract section 7).

Every process keeps the revocation check-list in memory and checks access tokens against it with
no database read. A process that cannot reach the database cannot learn what another process
revoked meanwhile, so once it has not caught up for 5 s, the endpoints that accept access tokens
answer 503 `server.unavailable` (with Retry-After), whatever token they are shown, until it has.

- PostgreSQL: servers A and B, two hosts' worth, on one database; A reaches it through a TCP relay
  that the test cuts (its connections dropped, new ones met with silence). B revokes a grant; A
  must never accept that grant's token once the 5 s are up; once the relay is back, A refuses it
  (401 `oauth2.token.revoked`) and serves good tokens again.
- SQLite: processes on one host share the file, so nothing cuts off one of them alone; what does
  happen is that the file cannot be read for a while, by any of them. The test puts the file in
  the state it is in while another process recovers the write-ahead log after a crash (the WAL
  lock bytes held, the shared-memory index invalid): every reader gets SQLITE_BUSY. B's revocation
  lands just before, and A must never accept the revoked token once its 5 s are up; once the file
  can be read again, A refuses it and serves good tokens.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import time
from dataclasses import dataclass, field

import pytest
from sqlalchemy.engine import make_url

from lbauth.clock import SystemClock
from tests.conftest import start_server
from tests.flow_helpers import full_setup, tokens_for
from tests.processes import ServerProcess
from tests.support import wait_until
from tests.test_outage import Silent

pytestmark = [pytest.mark.slow, pytest.mark.alone]

FRESH_SECONDS = 5  # contract section 7
WATCH_SECONDS = FRESH_SECONDS + 3  # how long the test watches A while it is cut off
MARGIN = 0.2  # A's last refresh began before the cut; this much more for the test's own timing


@dataclass
class Answer:
    started: float
    path: str
    token: str = field(repr=False)
    status: int
    sub_code: str | None
    retry_after: str | None


class LockedFile:
    """The SQLite file as it is while another process recovers its write-ahead log: that process
    holds the WAL's write, checkpoint and recovery locks (bytes 120-122 of the -shm file), and the
    shared-memory index is not valid, so every reader and writer gets SQLITE_BUSY at once. On
    release, the next reader rebuilds the index from the log, as SQLite does after a crash."""

    def __init__(self, database_url: str) -> None:
        self.shm = make_url(database_url).database + "-shm"
        self.fd: int | None = None

    def cut(self) -> None:
        self.fd = os.open(self.shm, os.O_RDWR)
        fcntl.lockf(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 3, 120)
        second_copy = bytearray(os.pread(self.fd, 48, 48))  # the index header is kept twice
        second_copy[40] ^= 0xFF  # the copies differ: the index must be rebuilt
        os.pwrite(self.fd, bytes(second_copy), 48)

    def restore(self) -> None:
        if self.fd is not None:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 3, 120)
            os.close(self.fd)
            self.fd = None


async def test_a_process_cut_off_from_the_database_fails_closed(tmp_path, database_url, backend):
    relay = await Silent(database_url).start() if backend == "postgresql" else None
    locked = LockedFile(database_url) if backend == "sqlite" else None
    data = tmp_path / "data"
    a = ServerProcess(relay.database_url if relay else database_url, data)
    b = ServerProcess(database_url, data, base_url=a.url)  # one deployment: the same issuer and audience
    a.env["LBAUTH_BASE_URL"] = a.url
    seeder = await start_server(tmp_path, database_url, env="development", clock=SystemClock(), base_url=a.url)
    try:
        await seeder.quiet()
        revoked_setup, good_setup = await full_setup(seeder), await full_setup(seeder)
        revoked = (await tokens_for(seeder, revoked_setup))["accessToken"]
        good = (await tokens_for(seeder, good_setup))["accessToken"]
    finally:
        seeder.client.close()
        await seeder.running.stop()
    answers: list[Answer] = []

    async def ask(path: str, token: str) -> Answer:
        started = time.monotonic()
        r = await a.client.get(path, bearer=token, timeout=5)
        answer = Answer(started, path, token, r.status, r.json.get("subCode"), r.headers.get("Retry-After"))
        answers.append(answer)
        return answer

    cut = False
    try:
        await a.start()
        await b.start()
        for token in (revoked, good):
            assert (await ask("/api/auth/me", token)).status == 200
        assert (await ask("/api/service/user/info", good)).status == 200

        if relay:  # A loses PostgreSQL; B revokes meanwhile
            cut_at, cut = time.monotonic(), True
            await relay.cut()
            r = await b.client.delete(f"/api/auth/authorizations/{revoked_setup.client_id}", bearer=revoked_setup.token)
            assert r.status == 200, r.text
        else:  # B revokes; then no process can read the file
            r = await b.client.delete(f"/api/auth/authorizations/{revoked_setup.client_id}", bearer=revoked_setup.token)
            assert r.status == 200, r.text
            cut_at, cut = time.monotonic(), True
            locked.cut()
        me = await b.client.get("/api/auth/me", bearer=revoked)
        assert me.status in (401, 503), me.text  # B never accepts it either

        while time.monotonic() - cut_at < WATCH_SECONDS:
            await ask("/api/auth/me", revoked)
            await ask("/api/service/user/info", good)
            await asyncio.sleep(0.2)

        window_end = cut_at + FRESH_SECONDS + MARGIN
        late = [x for x in answers if x.started > window_end]
        assert len(late) >= 4, answers
        wrong = [x for x in late if (x.status, x.sub_code) != (503, "server.unavailable") or not x.retry_after]
        assert not wrong, f"after {FRESH_SECONDS} s cut off, A answered: {wrong[:4]}"
        accepted = [x for x in answers if x.token == revoked and x.status == 200 and x.started > window_end]
        assert not accepted

        # Back in touch: the revocation is honoured, good tokens are served, with no restart.
        if relay:
            await relay.restore()
        else:
            locked.restore()
        cut = False

        async def caught_up() -> bool:
            return (await ask("/api/auth/me", revoked)).status == 401
        await wait_until(caught_up, 15, step=0.2)
        assert answers[-1].sub_code == "oauth2.token.revoked"
        assert (await ask("/api/auth/me", good)).status == 200
        assert (await ask("/api/service/user/info", good)).status == 200
        unexpected = [x for x in answers if x.status not in (200, 401, 503)]
        assert not unexpected, unexpected[:4]
    finally:
        if cut:
            await relay.restore() if relay else locked.restore()
        a.stop()
        b.stop()
        if relay:
            await relay.close()

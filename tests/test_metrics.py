"""GET /metrics (contract section 13): Prometheus text that prometheus-client's own parser reads,
counters that move with the traffic, and the access rule (open in development; a bearer token in
production; absent when no token is configured)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import running_server, start_server
from tests.flow_helpers import exchange, full_setup, refresh, tokens_for
from tests.support import wait_until

METRICS_TOKEN = "metrics-token-for-tests-0123456789"


@pytest.fixture
async def dev(tmp_path, database_url):
    async with running_server(tmp_path, database_url, env="development") as srv:
        yield srv


async def scrape(server, bearer: str | None = None) -> dict[tuple[str, tuple], float]:
    r = await server.client.get("/metrics", bearer=bearer)
    assert r.status == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_counters_move_with_the_traffic(dev):
    before = await scrape(dev)
    s = await full_setup(dev)
    tokens = await tokens_for(dev, s)
    assert (await refresh(dev, tokens["refreshToken"], s.client_id, s.client_secret)).status == 200
    for _ in range(3):
        assert (await dev.client.get("/api/auth/me", bearer=tokens["accessToken"])).status == 200
    (await dev.client.get("/api/auth/me", bearer="lba_at_not.a.token")).assert_error(401, "oauth2.token.invalid")
    (await exchange(dev, "lba_ac_unknown", s.redirect_uri, s.client_id, s.client_secret)).assert_error(
        400, "oauth2.code.invalid")
    after = await scrape(dev)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("lbauth_http_requests_total", route="/api/auth/me", method="GET", status="200") == 3
    assert moved("lbauth_http_requests_total", route="/api/auth/me", method="GET", status="401") == 1
    assert moved("lbauth_http_request_duration_seconds_count", route="/api/auth/me") == 4
    assert moved("lbauth_tokens_issued_total", grant_type="authorization_code") == 1
    assert moved("lbauth_tokens_issued_total", grant_type="refresh_token") == 1
    assert moved("lbauth_refusals_total", sub_code="oauth2.token.invalid") == 1
    assert moved("lbauth_refusals_total", sub_code="oauth2.code.invalid") == 1
    # The gauges are read at scrape time.
    assert ("lbauth_webhook_outbox_pending", ()) in after
    assert ("lbauth_webhook_outbox_oldest_pending_seconds", ()) in after
    assert ("lbauth_checklist_entries", ()) in after


async def test_outbox_and_check_list_gauges_follow_a_revocation(dev):
    s = await full_setup(dev)  # no webhook URL: the event is recorded failed at once, never pending
    await tokens_for(dev, s)
    await dev.quiet()
    before = await scrape(dev)
    r = await dev.client.delete(f"/api/auth/authorizations/{s.client_id}", bearer=s.token)
    assert r.status == 200, r.text
    after = await scrape(dev)
    assert value(after, "lbauth_checklist_entries") == value(before, "lbauth_checklist_entries") + 1


async def test_production_needs_the_metrics_token(tmp_path, database_url):
    off = await start_server(tmp_path, database_url)
    try:
        (await off.client.get("/metrics")).assert_error(404, "request.not_found")
    finally:
        off.client.close()
        await off.running.stop()
    on = await start_server(tmp_path, database_url, environ={"LBAUTH_METRICS_TOKEN": METRICS_TOKEN})
    try:
        (await on.client.get("/metrics")).assert_error(401, "oauth2.token.missing")
        (await on.client.get("/metrics", bearer="wrong")).assert_error(401, "oauth2.token.invalid")
        samples = await scrape(on, bearer=METRICS_TOKEN)
        assert any(name == "lbauth_http_requests_total" for name, _ in samples)
    finally:
        on.client.close()
        await on.running.stop()


async def test_workers_share_their_counts(tmp_path, database_url):
    """With two workers, every scrape reports the sum over both, whichever worker answers it; each
    worker's own counts (its file in the shared directory) show that both answered requests and
    scrapes.

    A worker counts a request in on_finish, just after the response is written, so the client can
    read a response a moment before its count lands: wait for the counts to settle, then every
    scrape, whichever worker answers it, must report the same sum.
    """
    from tests.processes import ServerProcess
    server = await ServerProcess(database_url, tmp_path / "data", workers="2").start()

    scrapes = 0

    async def healthz_count() -> float:
        nonlocal scrapes
        samples = await scrape(server)
        scrapes += 1
        return value(samples, "lbauth_http_requests_total", route="/healthz", method="GET", status="200")

    async def settled_at(expected: float) -> None:
        for _ in range(50):
            if await healthz_count() == expected:
                return
            await asyncio.sleep(0.05)
        assert await healthz_count() == expected

    async def counted_by_each(route: str, total: float) -> dict[int, float]:
        """Each worker's own count of `route`, once they add up to `total` (they land just after
        the answers): how many of those requests that process answered."""
        for _ in range(100):
            counts = {pid: value(samples, "lbauth_http_requests_total", route=route, method="GET", status="200")
                      for pid, samples in counts_by_process(tmp_path / "data" / "metrics").items()}
            if sum(counts.values()) == total:
                return counts
            await asyncio.sleep(0.05)
        raise AssertionError(f"{route}: the workers' own counts {counts} never added up to {total}")

    sent = 1  # start() saw exactly one 200 from /healthz

    async def both_answered() -> bool:
        """Ten more requests, each on a new connection (the kernel spreads those over the workers
        that listen: the second may start listening a moment after the first answered)."""
        nonlocal sent
        for _ in range(10):
            r = await server.client.get("/healthz", headers={"Connection": "close"})
            assert r.status == 200
            sent += 1
        counts = [value(samples, "lbauth_http_requests_total", route="/healthz", method="GET", status="200")
                  for samples in counts_by_process(tmp_path / "data" / "metrics").values()]
        return len([count for count in counts if count > 0]) == 2

    try:
        await settled_at(1)
        await wait_until(both_answered, 30, "both workers answering /healthz")
        await settled_at(sent)
        workers = worker_pids(server.proc.pid)
        assert len(workers) == 2, workers
        healthz = await counted_by_each("/healthz", sent)
        assert set(healthz) == workers and all(healthz[pid] > 0 for pid in workers), healthz  # both answered

        before = await counted_by_each("/metrics", scrapes)
        for _ in range(20):  # each scrape on a new connection: both workers answer some
            assert await healthz_count() == sent
        after = await counted_by_each("/metrics", scrapes)
        answered = {pid: after[pid] - before.get(pid, 0) for pid in workers}
        assert all(n > 0 for n in answered.values()), answered  # both workers reported the sum of both

        # A worker's file exists, empty, for a moment before the worker sizes it: a scrape then
        # reports what the other files hold, it does not fail (it answered 500 once).
        (tmp_path / "data" / "metrics" / "counter_4194304.db").touch()
        for _ in range(4):
            assert await healthz_count() == sent
    finally:
        server.stop()


def worker_pids(supervisor: int) -> set[int]:
    """The supervisor's child processes (the workers), from /proc."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[1]) == supervisor:  # state, then the parent's pid
            children.add(int(stat.parent.name))
    return children


def counts_by_process(directory: Path) -> dict[int, dict[tuple[str, tuple], float]]:
    """Each process's own counters: prometheus-client's multiprocess mode keeps them in one file per
    process, `counter_<pid>.db`, which the scrape sums. Read one file at a time, they tell the
    workers apart."""
    by_pid = {}
    for path in directory.glob("counter_*.db"):
        samples = {}
        for metric in MultiProcessCollector.merge([str(path)]):
            for sample in metric.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        by_pid[int(path.stem.rsplit("_", 1)[1])] = samples
    return by_pid

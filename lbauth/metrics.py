"""Prometheus metrics (contract section 13): one registry per server process.

Counted as things happen: requests by route and status with latency histograms, tokens issued by
grant type, refusals by subCode, webhook deliveries and mail attempts by outcome. Read from the database
and the process at scrape time: outbox depth, mail waiting, the age of the oldest pending event, check-list size.

With LBAUTH_WORKERS > 1 the workers write their values to files in `<data dir>/metrics`
(prometheus-client's multiprocess mode, `share_between_workers`), so whichever worker answers a
scrape reports the sum over all of them; a restarted worker's counts are kept.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, multiprocess, values

_SHARED_DIR = "PROMETHEUS_MULTIPROC_DIR"


def share_between_workers(directory: Path) -> None:
    """In the supervisor, before forking: start an empty directory for the workers' values."""
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, mode=0o700)
    os.environ[_SHARED_DIR] = str(directory)
    values.ValueClass = values.get_value_class()  # prometheus-client reads the variable on import


def worker_exited(pid: int) -> None:
    """Drop a dead worker's live gauges (its counters stay in the sums)."""
    if os.environ.get(_SHARED_DIR):
        multiprocess.mark_process_dead(pid)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._request_children: dict[tuple[str, str, int], tuple] = {}
        r = self.registry
        self.requests = Counter("lbauth_http_requests", "HTTP requests answered, by route and status.",
                                ["route", "method", "status"], registry=r)
        self.latency = Histogram("lbauth_http_request_duration_seconds", "Time to answer, by route.",
                                 ["route"], buckets=LATENCY_BUCKETS, registry=r)
        self.tokens_issued = Counter("lbauth_tokens_issued", "Access tokens issued, by grant type.",
                                     ["grant_type"], registry=r)
        self.refusals = Counter("lbauth_refusals", "Requests refused with an error, by subCode.",
                                ["sub_code"], registry=r)
        self.deliveries = Counter("lbauth_webhook_deliveries", "Webhook delivery attempts, by outcome.",
                                  ["outcome"], registry=r)
        # Across workers: the database's figures as the answering worker just read them; the
        # largest live worker's check-list.
        self.outbox_depth = Gauge("lbauth_webhook_outbox_pending", "Webhook events waiting to be delivered.",
                                  registry=r, multiprocess_mode="mostrecent")
        self.outbox_oldest = Gauge("lbauth_webhook_outbox_oldest_pending_seconds",
                                   "Age of the oldest webhook event still waiting (0 when none).", registry=r,
                                   multiprocess_mode="mostrecent")
        self.mail_deliveries = Counter("lbauth_mail_deliveries", "Mail sending attempts, by outcome.",
                                       ["outcome"], registry=r)
        self.mail_pending = Gauge("lbauth_mail_pending", "Mail messages waiting to be sent.", registry=r,
                                  multiprocess_mode="mostrecent")
        self.checklist_size = Gauge("lbauth_checklist_entries", "Entries on a worker's revocation check-list.",
                                    registry=r, multiprocess_mode="livemax")

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One answered request. The labelled children are kept: looking them up costs more than
        counting (this runs on every request)."""
        key = (route, method, status)
        children = self._request_children.get(key)
        if children is None:
            children = self._request_children[key] = (self.requests.labels(route, method, str(status)),
                                                      self.latency.labels(route))
        children[0].inc()
        children[1].observe(seconds)

    def render(self) -> bytes:
        shared = os.environ.get(_SHARED_DIR)
        if not shared:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=shared)
        return generate_latest(registry)

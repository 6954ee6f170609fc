"""Prometheus metrics (contract section 13): one registry per server process.

Counted as things happen: requests by route and status with latency histograms, tokens issued by
grant type, refusals by subCode, webhook deliveries by outcome. Read from the database and the
process at scrape time: outbox depth, the age of the oldest pending event, check-list size.
With LBAUTH_WORKERS > 1 each worker keeps its own registry and a scrape is answered by one of them.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
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
        self.outbox_depth = Gauge("lbauth_webhook_outbox_pending", "Webhook events waiting to be delivered.",
                                  registry=r)
        self.outbox_oldest = Gauge("lbauth_webhook_outbox_oldest_pending_seconds",
                                   "Age of the oldest webhook event still waiting (0 when none).", registry=r)
        self.checklist_size = Gauge("lbauth_checklist_entries", "Entries on this process's revocation check-list.",
                                    registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)

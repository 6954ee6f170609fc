"""Prometheus metrics (contract section 13): one registry per server process.

Counted as things happen: requests by route and status with latency histograms, tokens issued by
grant type, refusals by subCode, webhook deliveries and mail attempts by outcome. Read from the database
and the process at scrape time: outbox depth, mail waiting, the age of the oldest pending event, check-list size.

With LBAUTH_WORKERS > 1 the workers write their values to files in `<data dir>/metrics`
(prometheus-client's multiprocess mode, `share_between_workers`), so whichever worker answers a
scrape reports the sum over all of them; a restarted worker's counts are kept.
"""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Metric,
    generate_latest,
    multiprocess,
    values,
)

from lbauth.errors import DPoPBoundTokenAsBearer, DPoPProofInvalid, LbauthError, MfaFailed, RateLimited

_SHARED_DIR = "PROMETHEUS_MULTIPROC_DIR"
_SIZED = 8  # bytes: a worker's file holds at least its header (the length it uses) once sized


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

SECOND_STEP_METHODS = ("totp", "recovery_code", "passkey")
DEVICE_CODE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"

# Why a DPoP proof was refused, from what the refusal says (lbauth.verify.dpop, core/oauth/dpop.py,
# core/oauth/grants.py): the first reason whose words the message holds. tests/test_flow_metrics.py
# keeps this table in step with the messages.
_DPOP_REASONS = (
    ("replayed", ("used before",)),
    ("wrong_key", ("another key", "bound to a dpop key")),
    ("missing", ("proof is required", "exactly one dpop header", "send a dpop proof")),
    ("wrong_request", ("htm is not", "htu is not")),
    ("stale", ("iat is not",)),
    ("access_token_hash", ("ath is",)),
    ("nonce", ("nonce",)),
    ("signature", ("signature does not verify",)),
)


def dpop_reason(error: LbauthError) -> str:
    """A DPoP refusal's reason, one of a few (a label): bearer_scheme (a bound token sent as Bearer),
    replayed, wrong_key, missing, wrong_request (htm, htu), stale (iat), access_token_hash (ath),
    nonce, signature, else malformed (the proof itself: its form, header, key or claims)."""
    if isinstance(error, DPoPBoundTokenAsBearer):
        return "bearer_scheme"
    message = error.message.lower()
    for reason, words in _DPOP_REASONS:
        if any(word in message for word in words):
            return reason
    return "malformed"


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
        # The accounts' and devices' flows (contracts 18 to 20).
        self.signups = Counter("lbauth_signups", "Sign-ups, by step: requested (the form accepted, a link "
                               "mailed), completed (the link followed: the account made).", ["step"], registry=r)
        self.password_resets = Counter("lbauth_password_resets", "Password resets, by step: requested (a "
                                       "link asked for), completed (a new password set).", ["step"], registry=r)
        self.second_steps = Counter("lbauth_second_steps", "Second steps of sign-ins, by method (totp, "
                                    "recovery_code, passkey) and outcome (succeeded, failed, rate_limited).",
                                    ["method", "outcome"], registry=r)
        self.device_grants = Counter("lbauth_device_grants", "Device authorization grants, by step: started "
                                     "(a device code issued), approved, denied (by the user), tokens_issued.",
                                     ["step"], registry=r)
        self.dpop_refusals = Counter("lbauth_dpop_refusals", "Requests refused for their DPoP proof or "
                                     "DPoP-bound token, by reason.", ["reason"], registry=r)

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

    @contextmanager
    def second_step(self, method: str) -> Iterator[None]:
        """Count the second step in the block: succeeded if it returns, failed (a wrong code, a step
        used or expired) or rate_limited if it raises that. A method lbauth does not know is not
        counted (its label would be the caller's to choose)."""
        if method not in SECOND_STEP_METHODS:
            yield
            return
        try:
            yield
        except MfaFailed:
            self.second_steps.labels(method, "failed").inc()
            raise
        except RateLimited:
            self.second_steps.labels(method, "rate_limited").inc()
            raise
        self.second_steps.labels(method, "succeeded").inc()

    def refused(self, error: LbauthError) -> None:
        """An error answered (BaseHandler.write_error): by subCode, and DPoP's by reason."""
        self.refusals.labels(error.sub_code).inc()
        if isinstance(error, DPoPProofInvalid | DPoPBoundTokenAsBearer):
            self.dpop_refusals.labels(dpop_reason(error)).inc()

    def render(self) -> bytes:
        shared = os.environ.get(_SHARED_DIR)
        if not shared:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        registry.register(_WorkersFiles(shared))
        return generate_latest(registry)


class _WorkersFiles:
    """prometheus-client's MultiProcessCollector, without the files a worker has just created and
    not yet sized: for a moment a new one is empty, holds nothing, and would fail the whole scrape
    (prometheus/client_python#1199)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def collect(self) -> Iterator[Metric]:
        files = []
        for name in glob.glob(os.path.join(self.directory, "*.db")):
            try:
                if os.path.getsize(name) >= _SIZED:
                    files.append(name)
            except FileNotFoundError:  # a dead worker's live gauges, dropped meanwhile
                continue
        return iter(multiprocess.MultiProcessCollector.merge(files, accumulate=True))

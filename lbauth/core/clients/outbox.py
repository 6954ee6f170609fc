"""The `authorization.revoked` webhook (spec section 6, contract section 10) as a transactional
outbox: events are written in the same transaction as the change they report, then claimed and
delivered at least once by every server process's deliverer (lbauth.delivery).

This module decides what to write and what each delivery outcome means; it does no HTTP.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from lbauth import tracing
from lbauth.clock import Clock, iso
from lbauth.core.crypto import opaque
from lbauth.errors import ApplicationNotFound, NotFound, ValidationFailed
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import AppChanges, WebhookAttempt, WebhookEvent
from lbauth.storage.repo import apps as apps_repo
from lbauth.storage.repo import webhooks as repo

EVENT_TYPE = "authorization.revoked"
USER_REVOKED = "user_revoked"
TEST_DELIVERY = "test_delivery"
STATUSES = ("pending", "delivered", "failed")
JITTER = 0.1  # each retry delay is drawn from +/- 10% of the schedule's value
MAX_RETRY_AFTER = 86400  # a receiver may ask for a pause, not park an event for years


def payload(event_id: str, app_id: str, asu: str, reason: str, occurred_at: int) -> str:
    """The exact body sent at every attempt (spec section 6, Payload)."""
    return json.dumps({"eventId": event_id, "eventType": EVENT_TYPE, "occurredAt": iso(occurred_at),
                       "appId": app_id, "appScopedUserId": asu, "reason": reason}, separators=(",", ":"))


def write_event(conn: Connection, *, app_id: str, asu: str, reason: str, now: int, deliverable: bool = True) -> str:
    """Inside the caller's transaction: the event commits, or not, with the change it reports. An
    app with no webhook URL gets the event recorded as failed: visible, and redeliverable once
    it has a URL, rather than pending for ever. With tracing on, the event keeps the trace of the
    change (its `traceparent`), which its delivery continues, whichever process makes it."""
    event_id = opaque.new_id("evt_")
    status, next_attempt_at, last_error = ("pending", now, None) if deliverable else \
        ("failed", None, "the app has no webhook URL")
    repo.insert_event(conn, event_id=event_id, app_id=app_id, event_type=EVENT_TYPE, reason=reason, asu=asu,
                      payload=payload(event_id, app_id, asu, reason, now), status=status,
                      next_attempt_at=next_attempt_at, last_error=last_error, now=now,
                      traceparent=tracing.traceparent())
    return event_id


class Outcome(Enum):
    DELIVERED = "delivered"
    RETRY = "retry"  # timeout, connection failure, 3xx, 408, 429, 5xx
    GONE = "gone"  # 410: the app's webhook is disabled until its owner re-enables it
    FAILED = "failed"  # any other 4xx, or an address a production webhook may not reach


def classify(status: int | None) -> Outcome:
    """Contract section 10. `status` None: no HTTP answer (timeout, refused, reset)."""
    if status is None or 300 <= status < 400 or status in (408, 429) or status >= 500:
        return Outcome.RETRY
    if 200 <= status < 300:
        return Outcome.DELIVERED
    if status == 410:
        return Outcome.GONE
    return Outcome.FAILED


def retry_delay(schedule: Sequence[int], round_attempts: int, retry_after: int | None,
                rng: random.Random | None = None) -> int | None:
    """Seconds until the next attempt, or None when the schedule is spent. Exponential-ish backoff
    from the schedule, +/-10% jitter so a receiver's recovery is not met by a thundering herd;
    Retry-After means "not sooner than"."""
    if round_attempts > len(schedule):
        return None
    base = schedule[round_attempts - 1]
    delay = round(base * (1 + (rng or random).uniform(-JITTER, JITTER)))
    return max(1, delay, min(retry_after or 0, MAX_RETRY_AFTER))


@dataclass(frozen=True)
class Claimed:
    event_id: str
    app_id: str
    client_id: str
    url: str
    secret_sealed: str
    payload: str
    round_attempts: int
    attempts: int
    traceparent: str | None = None  # the trace of the change that queued it (tracing on)


async def claim_due(db: Database, clock: Clock, limit: int, lease_seconds: int, *, per_app: int,
                    in_flight: Mapping[str, int]) -> list[Claimed]:
    """Lease what is due, within the claimer's room: `limit` in all, `per_app` per app counting
    its deliveries `in_flight`."""
    now = int(clock.now())
    if not await db.read(repo.any_due, now):
        return []
    events = await db.transaction(repo.claim_due, now, now + lease_seconds, limit, per_app, in_flight)
    # Claimed events are of apps with a webhook URL (repo.claim_due).
    return [Claimed(e.id, e.app_id, e.client_id, e.webhook_url or "", e.webhook_secret_sealed, e.payload,
                    e.round_attempts, e.attempts, e.traceparent) for e in events]


async def record(db: Database, clock: Clock, event: Claimed, *, status: int | None, latency_ms: int,
                 error: str | None, retry_after: int | None, schedule: Sequence[int], forced: Outcome | None = None,
                 rng: random.Random | None = None) -> Outcome:
    """Write the attempt and what follows from it, in one transaction."""
    now = int(clock.now())
    outcome = forced or classify(status)
    round_attempts = event.round_attempts + 1
    status_after, next_attempt_at, delivered_at = None, None, None
    if outcome is Outcome.DELIVERED:
        status_after, delivered_at = "delivered", now
    elif outcome is Outcome.RETRY and (delay := retry_delay(schedule, round_attempts, retry_after, rng)):
        next_attempt_at = now + delay  # still pending
    else:  # refused, gone, or retries spent: it stays visible as failed and can be redelivered
        status_after = "failed"

    def work(conn: Connection) -> None:
        repo.insert_attempt(conn, event_id=event.event_id, attempted_at=now, status=status, latency_ms=latency_ms,
                            error=error)
        repo.settle_attempt(conn, event.event_id, attempts=event.attempts + 1, round_attempts=round_attempts,
                            last_status=status, last_error=error, next_attempt_at=next_attempt_at,
                            status=status_after, delivered_at=delivered_at)
        if outcome is Outcome.GONE:
            apps_repo.update_app(conn, event.app_id, AppChanges(webhook_disabled_at=now), now)
    await db.transaction(work)
    return outcome


async def send_test(db: Database, clock: Clock, client_id: str) -> str:
    """A test delivery (spec section 6): reason `test_delivery`, an `asu_test_` id that belongs to
    no user, and no grant touched. Returns the event's id."""
    def work(conn: Connection) -> str:
        app = apps_repo.by_client_id(conn, client_id)
        if app is None:
            raise ApplicationNotFound()
        if not app.webhook_url:
            raise ValidationFailed("This app has no webhook URL; set one first.")
        return write_event(conn, app_id=app.id, asu=opaque.new_id("asu_test_"), reason=TEST_DELIVERY,
                           now=int(clock.now()))
    return await db.transaction(work)


async def list_events(db: Database, *, client_id: str | None = None,
                      status: str | None = None) -> list[WebhookEvent]:
    """The events, newest first."""
    if status is not None and status not in STATUSES:
        raise ValidationFailed(f"status must be one of {', '.join(STATUSES)}")

    def work(conn: Connection) -> list[WebhookEvent]:
        app_id = None
        if client_id is not None:
            app = apps_repo.by_client_id(conn, client_id)
            if app is None:
                raise ApplicationNotFound()
            app_id = app.id
        return repo.events(conn, app_id=app_id, status=status)
    return await db.read(work)


async def attempts_of(db: Database, event_ids: list[str]) -> dict[str, list[WebhookAttempt]]:
    """Each event's delivery attempts, by event id."""
    found: dict[str, list[WebhookAttempt]] = {event_id: [] for event_id in event_ids}
    for attempt in await db.read(repo.attempts, event_ids):
        found[attempt.event_id].append(attempt)
    return found


async def redeliver(db: Database, clock: Clock, event_id: str, *,
                    client_id: str | None = None) -> WebhookEvent:
    """Queue an event again, now, with a fresh round of the retry schedule (same eventId).
    With `client_id`, only an event of that app (the console: its owner's events only)."""
    now = int(clock.now())

    def work(conn: Connection) -> WebhookEvent:
        event = repo.by_id(conn, event_id)
        if event is None or client_id is not None and event.client_id != client_id:
            raise NotFound("No such webhook event.")
        repo.requeue(conn, event_id, now)
        requeued = repo.by_id(conn, event_id)
        assert requeued is not None  # in this transaction, since the read above
        return requeued
    return await db.transaction(work)


async def pending_summary(db: Database, clock: Clock) -> tuple[int, int]:
    """(events waiting to be delivered, seconds the oldest has waited), for /metrics."""
    count, oldest = await db.read(repo.pending_summary)
    return count, max(0, int(clock.now()) - oldest) if oldest is not None else 0

"""The webhook outbox and its delivery attempts."""

from __future__ import annotations

import collections
from collections.abc import Mapping

from sqlalchemy import Connection, Select, func, insert, or_, select, update

from lbauth.storage.models import apps, webhook_attempts, webhook_events
from lbauth.storage.records import WebhookAttempt, WebhookEvent
from lbauth.storage.repo import shaped

_WITH_APP = shaped(WebhookEvent, select(webhook_events, apps.c.client_id, apps.c.webhook_url,
                                        apps.c.webhook_secret_sealed, apps.c.webhook_disabled_at)
                   .join(apps, apps.c.id == webhook_events.c.app_id))
_ATTEMPTS = shaped(WebhookAttempt, select(webhook_attempts))


def insert_event(conn: Connection, *, event_id: str, app_id: str, event_type: str, reason: str, asu: str,
                 payload: str, status: str, next_attempt_at: int | None, last_error: str | None, now: int,
                 traceparent: str | None = None) -> None:
    conn.execute(insert(webhook_events).values(
        id=event_id, app_id=app_id, event_type=event_type, reason=reason, asu=asu, payload=payload, attempts=0,
        round_attempts=0, created_at=now, status=status, next_attempt_at=next_attempt_at, last_error=last_error,
        traceparent=traceparent))


def _due(now: int) -> Select[tuple[str]]:
    return (select(webhook_events.c.id)
            .join(apps, apps.c.id == webhook_events.c.app_id)
            .where(webhook_events.c.status == "pending", webhook_events.c.next_attempt_at <= now,
                   or_(webhook_events.c.lease_until.is_(None), webhook_events.c.lease_until < now),
                   apps.c.webhook_url.is_not(None), apps.c.webhook_disabled_at.is_(None)))


def any_due(conn: Connection, now: int) -> bool:
    """A cheap read first, so an idle deliverer never takes the write lock."""
    return conn.execute(_due(now).limit(1)).first() is not None


def claim_due(conn: Connection, now: int, lease_until: int, limit: int, per_app: int,
              in_flight: Mapping[str, int]) -> list[WebhookEvent]:
    """Lease up to `limit` due events of apps whose webhook is on, at most `per_app` per app
    counting the `in_flight` ones. Concurrent claimers never get the same event: PostgreSQL skips
    rows another transaction has locked (FOR UPDATE SKIP LOCKED); SQLite runs one writer at a
    time (BEGIN IMMEDIATE)."""
    query = _due(now).add_columns(webhook_events.c.app_id)
    full = [app_id for app_id, count in in_flight.items() if count >= per_app]
    if full:
        query = query.where(webhook_events.c.app_id.not_in(full))
    due = (query.order_by(webhook_events.c.next_attempt_at, webhook_events.c.created_at)
           .limit(limit * per_app).with_for_update(of=webhook_events, skip_locked=True))
    ids: list[str] = []
    counts = collections.Counter(in_flight)
    for event_id, app_id in conn.execute(due):
        if counts[app_id] < per_app:
            ids.append(event_id)
            counts[app_id] += 1
            if len(ids) == limit:
                break
    if not ids:
        return []
    conn.execute(update(webhook_events).where(webhook_events.c.id.in_(ids)).values(lease_until=lease_until))
    return [WebhookEvent(*row) for row in conn.execute(_WITH_APP.where(webhook_events.c.id.in_(ids)))]


def insert_attempt(conn: Connection, *, event_id: str, attempted_at: int, status: int | None, latency_ms: int,
                   error: str | None) -> None:
    conn.execute(insert(webhook_attempts).values(event_id=event_id, attempted_at=attempted_at, status=status,
                                                 latency_ms=latency_ms, error=error))


def settle_attempt(conn: Connection, event_id: str, *, attempts: int, round_attempts: int, last_status: int | None,
                   last_error: str | None, next_attempt_at: int | None, status: str | None = None,
                   delivered_at: int | None = None) -> None:
    """An attempt's outcome on its event, and the lease released. `status` and `delivered_at` are
    written only when given: a retry stays pending, a failure keeps an earlier delivery's time."""
    outcome: dict[str, object] = {"status": status} if status is not None else {}
    if delivered_at is not None:
        outcome["delivered_at"] = delivered_at
    conn.execute(update(webhook_events).where(webhook_events.c.id == event_id).values(
        attempts=attempts, round_attempts=round_attempts, last_status=last_status, last_error=last_error,
        lease_until=None, next_attempt_at=next_attempt_at, **outcome))


def requeue(conn: Connection, event_id: str, now: int) -> None:
    """Pending again, due now, with a fresh round of the retry schedule."""
    conn.execute(update(webhook_events).where(webhook_events.c.id == event_id)
                 .values(status="pending", next_attempt_at=now, round_attempts=0, lease_until=None))


def by_id(conn: Connection, event_id: str) -> WebhookEvent | None:
    row = conn.execute(_WITH_APP.where(webhook_events.c.id == event_id)).first()
    return WebhookEvent(*row) if row is not None else None


def events(conn: Connection, *, app_id: str | None = None, status: str | None = None,
           limit: int = 500) -> list[WebhookEvent]:
    query = _WITH_APP.order_by(webhook_events.c.created_at.desc(), webhook_events.c.id).limit(limit)
    if app_id is not None:
        query = query.where(webhook_events.c.app_id == app_id)
    if status is not None:
        query = query.where(webhook_events.c.status == status)
    return [WebhookEvent(*row) for row in conn.execute(query)]


def attempts(conn: Connection, event_ids: list[str]) -> list[WebhookAttempt]:
    query = _ATTEMPTS.where(webhook_attempts.c.event_id.in_(event_ids)).order_by(webhook_attempts.c.id)
    return [WebhookAttempt(*row) for row in conn.execute(query)]


def pending_summary(conn: Connection) -> tuple[int, int | None]:
    """How many events wait to be delivered, and when the oldest of them was created."""
    count, oldest = conn.execute(select(func.count(), func.min(webhook_events.c.created_at))
                                 .where(webhook_events.c.status == "pending")).one()
    return count, oldest

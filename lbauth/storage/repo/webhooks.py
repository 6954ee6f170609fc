"""The webhook outbox and its delivery attempts."""

from __future__ import annotations

import collections
from collections.abc import Mapping

from sqlalchemy import Connection, Row, func, insert, or_, select, update

from lbauth.storage.models import apps, webhook_attempts, webhook_events

_WITH_APP = (select(webhook_events, apps.c.client_id, apps.c.webhook_url, apps.c.webhook_secret_sealed,
                    apps.c.webhook_disabled_at)
             .join(apps, apps.c.id == webhook_events.c.app_id))


def insert_event(conn: Connection, **values: object) -> None:
    conn.execute(insert(webhook_events).values(**values))


def _due(now: int):
    return (select(webhook_events.c.id)
            .join(apps, apps.c.id == webhook_events.c.app_id)
            .where(webhook_events.c.status == "pending", webhook_events.c.next_attempt_at <= now,
                   or_(webhook_events.c.lease_until.is_(None), webhook_events.c.lease_until < now),
                   apps.c.webhook_url.is_not(None), apps.c.webhook_disabled_at.is_(None)))


def any_due(conn: Connection, now: int) -> bool:
    """A cheap read first, so an idle deliverer never takes the write lock."""
    return conn.execute(_due(now).limit(1)).first() is not None


def claim_due(conn: Connection, now: int, lease_until: int, limit: int, per_app: int,
              in_flight: Mapping[str, int]) -> list[Row]:
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
    ids, counts = [], collections.Counter(in_flight)
    for event_id, app_id in conn.execute(due):
        if counts[app_id] < per_app:
            ids.append(event_id)
            counts[app_id] += 1
            if len(ids) == limit:
                break
    if not ids:
        return []
    conn.execute(update(webhook_events).where(webhook_events.c.id.in_(ids)).values(lease_until=lease_until))
    return list(conn.execute(_WITH_APP.where(webhook_events.c.id.in_(ids))))


def record_attempt(conn: Connection, **values: object) -> None:
    conn.execute(insert(webhook_attempts).values(**values))


def update_event(conn: Connection, event_id: str, **values: object) -> None:
    conn.execute(update(webhook_events).where(webhook_events.c.id == event_id).values(**values))


def by_id(conn: Connection, event_id: str) -> Row | None:
    return conn.execute(_WITH_APP.where(webhook_events.c.id == event_id)).first()


def events(conn: Connection, *, app_id: str | None = None, status: str | None = None,
           limit: int = 500) -> list[Row]:
    query = _WITH_APP.order_by(webhook_events.c.created_at.desc(), webhook_events.c.id).limit(limit)
    if app_id is not None:
        query = query.where(webhook_events.c.app_id == app_id)
    if status is not None:
        query = query.where(webhook_events.c.status == status)
    return list(conn.execute(query))


def attempts(conn: Connection, event_ids: list[str]) -> list[Row]:
    return list(conn.execute(select(webhook_attempts).where(webhook_attempts.c.event_id.in_(event_ids))
                             .order_by(webhook_attempts.c.id)))



def pending_summary(conn: Connection) -> tuple[int, int | None]:
    """How many events wait to be delivered, and when the oldest of them was created."""
    count, oldest = conn.execute(select(func.count(), func.min(webhook_events.c.created_at))
                                 .where(webhook_events.c.status == "pending")).one()
    return count, oldest

"""The audit log as stored (contract 21). `insert` runs inside the unit of work of the change the
event records, so the two commit together or not at all; the reads are a user's own events by
cursor (newest first) and the operators' listing; `erase_personal` and `delete_before` are the
erasure (contract 16) and the retention."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from sqlalchemy import Connection, case, delete, insert, select, update

from lbauth.storage.models import audit_events, users
from lbauth.storage.records import AuditEvent, ListedAuditEvent
from lbauth.storage.repo import shaped

_ALL = shaped(AuditEvent, select(audit_events))
# The email of the user concerned; none for a deleted account (its row holds a placeholder).
_WITH_EMAIL = (select(audit_events, case((users.c.deleted_at.is_(None), users.c.email), else_=None))
               .outerjoin(users, users.c.id == audit_events.c.user_id))
_COLUMNS = len(fields(AuditEvent))
_INSERT = insert(audit_events)


def insert_event(conn: Connection, **values: Any) -> None:
    """One event; `values` are every column but `seq`."""
    conn.execute(_INSERT, values)


def of_user(conn: Connection, user_id: str, *, before: int | None, limit: int) -> list[AuditEvent]:
    """Up to `limit` of the user's events, newest first, older than the cursor `before` (a `seq`)."""
    query = _ALL.where(audit_events.c.user_id == user_id)
    if before is not None:
        query = query.where(audit_events.c.seq < before)
    query = query.order_by(audit_events.c.seq.desc()).limit(limit)
    return [AuditEvent(*row) for row in conn.execute(query)]


def listed(conn: Connection, *, user_id: str | None = None, event_type: str | None = None, since: int | None = None,
           before: int | None = None, limit: int = 1000) -> list[ListedAuditEvent]:
    """Events for operators, newest first, with the email of the user concerned: all of them, or
    one user's, one type's (`event_type`), those at or after `since`; older than the cursor `before`."""
    query = _WITH_EMAIL
    if user_id is not None:
        query = query.where(audit_events.c.user_id == user_id)
    if event_type is not None:
        query = query.where(audit_events.c.type == event_type)
    if since is not None:
        query = query.where(audit_events.c.occurred_at >= since)
    if before is not None:
        query = query.where(audit_events.c.seq < before)
    query = query.order_by(audit_events.c.seq.desc()).limit(limit)
    return [ListedAuditEvent(AuditEvent(*row[:_COLUMNS]), row[_COLUMNS]) for row in conn.execute(query)]


def erase_personal(conn: Connection, user_id: str) -> None:
    """A deleted user's events keep what happened and when, not where from (contract 16)."""
    conn.execute(update(audit_events).where(audit_events.c.user_id == user_id)
                 .values(ip_address=None, user_agent=None))


def delete_before(conn: Connection, before: int, batch: int) -> int:
    """Delete up to `batch` events that occurred before `before`; how many."""
    oldest = select(audit_events.c.seq).where(audit_events.c.occurred_at < before).limit(batch)
    return conn.execute(delete(audit_events).where(audit_events.c.seq.in_(oldest))).rowcount

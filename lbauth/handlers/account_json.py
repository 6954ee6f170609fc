"""The JSON shapes of the account records (contract sections 2, 4, 16 and 21): what the account API
sends, what the account pages show, and what `lbauth users ... --json` prints. One function per
shape; times in ISO 8601 UTC (contract 3)."""

from __future__ import annotations

from typing import Any

from lbauth.clock import iso
from lbauth.core.accounts.accounts import AccountChange
from lbauth.core.accounts.sessions import EndedSession, ListedSession
from lbauth.core.audit.log import describe
from lbauth.storage.records import AuditEvent, User


def created_user_json(user: User) -> dict[str, Any]:
    """`lbauth users create`."""
    return {"userId": user.id, "email": user.email, "name": user.name}


def listed_user_json(user: User) -> dict[str, Any]:
    """One account of `lbauth users list`."""
    return {"userId": user.id, "email": user.email, "name": user.name, "disabled": user.disabled_at is not None,
            "createdAt": iso(user.created_at)}


def profile_json(user: User) -> dict[str, Any]:
    """GET and PATCH /api/account/profile, and the account page."""
    return {"userId": user.id, "email": user.email, "name": user.name, "avatar": user.avatar, "bio": user.bio,
            "interestTags": list(user.interest_tags), "createdAt": iso(user.created_at),
            "emailVerified": user.email_verified}


def account_change_json(change: AccountChange) -> dict[str, Any]:
    """`lbauth users disable|enable|delete`."""
    return {"userId": change.user_id, "email": change.email, "status": str(change.status)}


def account_deleted_json(change: AccountChange) -> dict[str, Any]:
    """DELETE /api/account: the email is gone, so not named."""
    return {"userId": change.user_id, "status": str(change.status), "deletedAt": iso(change.deleted_at),
            "revokedAuthorizations": change.revoked_authorizations}


def listed_session_json(listed: ListedSession) -> dict[str, Any]:
    """One item of GET /api/account/sessions, and of the sessions page."""
    s = listed.session
    return {"sessionId": s.id, "kind": s.kind, "createdAt": iso(s.created_at), "lastUsedAt": iso(s.last_used_at),
            "userAgent": s.user_agent, "ipAddress": s.ip_address, "current": listed.current}


def ended_session_json(ended: EndedSession) -> dict[str, Any]:
    """DELETE /api/account/sessions/{sessionId} and POST /api/auth/logout."""
    return {"sessionId": ended.session_id, "endedAt": iso(ended.ended_at)}


def audit_event_json(event: AuditEvent) -> dict[str, Any]:
    """One event of the audit log: an item of GET /api/account/activity, a line of `lbauth audit
    list --json` (which adds the user's email). `description`: the event in words, as the activity
    page shows it."""
    return {"eventId": event.event_id, "occurredAt": iso(event.occurred_at), "type": event.type,
            "actor": {"type": event.actor_type, "id": event.actor_id}, "userId": event.user_id,
            "ipAddress": event.ip_address, "userAgent": event.user_agent, "outcome": event.outcome,
            "detail": dict(event.detail or {}), "description": describe(event)}

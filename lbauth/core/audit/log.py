"""Reading the audit log (contract 21): a user's own events, a page at a time, newest first; the
operators' listing; each event in words; and the retention that deletes old events."""

from __future__ import annotations

import base64
import binascii
from collections.abc import AsyncIterator
from dataclasses import dataclass

from lbauth import errors
from lbauth.clock import Clock
from lbauth.core.accounts.users import normalize_email
from lbauth.core.audit.agents import describe_agent
from lbauth.core.audit.events import ActorKind, EventType, Outcome
from lbauth.storage.db import Database
from lbauth.storage.records import AuditEvent, ListedAuditEvent
from lbauth.storage.repo import audit as repo
from lbauth.storage.repo import users as users_repo

DEFAULT_PAGE, MAX_PAGE = 20, 100
OPERATOR_PAGE = 1000  # `lbauth audit list` reads this many at a time
PRUNE_BATCH, PRUNE_BATCHES = 1000, 50  # retention: at most this many rows a sweep, a batch a transaction
_CURSOR_PREFIX = "ae1:"


@dataclass(frozen=True)
class ActivityPage:
    events: list[AuditEvent]
    next_cursor: str | None  # None: there is nothing older


def encode_cursor(seq: int) -> str:
    return base64.urlsafe_b64encode(f"{_CURSOR_PREFIX}{seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: object) -> int:
    """The position a cursor of this log names; ValidationFailed for anything else."""
    try:
        if not isinstance(cursor, str) or len(cursor) > 40:
            raise ValueError(cursor)
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        digits = text[len(_CURSOR_PREFIX):]
        if not text.startswith(_CURSOR_PREFIX) or not digits.isascii() or not digits.isdigit() \
                or int(digits) >= 2 ** 63:  # a BIGINT
            raise ValueError(cursor)
        return int(digits)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise errors.ValidationFailed("cursor must be a nextCursor of an earlier answer", field="cursor") from None


def page_size(limit: object) -> int:
    """`limit` as sent (a query string's text, or None): 1 to MAX_PAGE, DEFAULT_PAGE when absent."""
    if limit is None:
        return DEFAULT_PAGE
    text = str(limit)
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_PAGE:
        raise errors.ValidationFailed(f"limit must be a whole number from 1 to {MAX_PAGE}", field="limit")
    return int(text)


class AuditLog:
    """The log's reads and its retention (`services.audit`); events are written by `record`."""

    def __init__(self, db: Database, clock: Clock, retention_days: int) -> None:
        self.db, self.clock, self.retention_days = db, clock, retention_days

    async def activity(self, user_id: str, cursor: object = None, limit: int = DEFAULT_PAGE) -> ActivityPage:
        """A user's own events, newest first, after `cursor` (a `next_cursor` of the page before)."""
        before = decode_cursor(cursor) if cursor is not None else None
        events = await self.db.read(repo.of_user, user_id, before=before, limit=limit + 1)
        more = len(events) > limit
        events = events[:limit]
        return ActivityPage(events, encode_cursor(events[-1].seq) if more else None)

    async def listed(self, *, email: str | None = None, event_type: str | None = None,
                     since: int | None = None, limit: int | None = None) -> AsyncIterator[ListedAuditEvent]:
        """Operators' listing, newest first, read a page at a time: every event, or one user's (by
        email, or by user id for an account deleted since), one type's, those at or after `since`."""
        user_id = await self._user_id(email) if email is not None else None
        before, left = None, limit
        while left is None or left > 0:
            size = OPERATOR_PAGE if left is None else min(left, OPERATOR_PAGE)
            page = await self.db.read(repo.listed, user_id=user_id, event_type=event_type, since=since, before=before,
                                      limit=size)
            for item in page:
                yield item
            if len(page) < size:
                return
            before = page[-1].event.seq
            left = None if left is None else left - len(page)

    async def _user_id(self, email: str) -> str:
        if email.startswith("usr_"):
            return email
        user = await self.db.read(users_repo.by_email, normalize_email(email))
        if user is None:
            raise errors.UserNotFound()
        return user.id

    async def forget_old(self) -> int:
        """Delete the events older than the retention (LBAUTH_AUDIT_RETENTION_DAYS), in bounded
        batches, each its own short transaction; how many."""
        before = int(self.clock.now()) - self.retention_days * 86400
        removed = 0
        for _ in range(PRUNE_BATCHES):
            count = await self.db.transaction(repo.delete_before, before, PRUNE_BATCH, single_statement=True)
            removed += count
            if count < PRUNE_BATCH:
                break
        return removed


# ---- an event in words ------------------------------------------------------------------------------

_METHODS = {"totp": "an authenticator app", "recovery_code": "a recovery code", "passkey": "a passkey"}
_SIGN_IN_HOW = {"passkey": " with a passkey", "signup": " after confirming a new account",
                "password+totp": " with a password and an authenticator app",
                "password+recovery_code": " with a password and a recovery code",
                "password+passkey": " with a password and a passkey"}
_REASONS = {"wrong_password": "wrong password", "disabled": "account disabled"}
_FIXED = {
    EventType.PASSKEY_ADDED: "Passkey added", EventType.PASSKEY_REMOVED: "Passkey removed",
    EventType.TOTP_ADDED: "Authenticator app added", EventType.TOTP_REMOVED: "Authenticator app removed",
    EventType.RECOVERY_CODE_USED: "Recovery code used",
    EventType.RECOVERY_CODES_REGENERATED: "New recovery codes made",
    EventType.FACTORS_RESET: "Every second factor removed",
    EventType.PASSWORD_CHANGED: "Password changed", EventType.PASSWORD_RESET: "Password reset with an emailed link",
    EventType.EMAIL_CHANGED: "Email address changed", EventType.EMAIL_VERIFIED: "Email address verified",
    EventType.USER_DISABLED: "Account disabled", EventType.USER_ENABLED: "Account enabled",
    EventType.USER_DELETED: "Account deleted",
}


def where(event: AuditEvent) -> str:
    """"Chrome on Linux, 127.0.0.1": the device in words and the address, or what of them is known."""
    parts = [describe_agent(event.user_agent)] if event.user_agent else []
    if event.ip_address:
        parts.append(event.ip_address)
    return ", ".join(parts)


def describe(event: AuditEvent) -> str:
    """The event as one sentence a person reads: "Signed in from Chrome on Linux, 127.0.0.1"."""
    detail = event.detail or {}
    origin = where(event)
    by = {ActorKind.OPERATOR: " by an operator", ActorKind.SYSTEM: " by the server"}.get(
        ActorKind(event.actor_type), "")
    app = detail.get("app") or detail.get("clientId") or "an app"
    what: str
    match event.type:
        case EventType.SIGN_IN if event.outcome == Outcome.FAILURE:
            reason = _REASONS.get(str(detail.get("reason")), "")
            what = "Failed sign-in" + (f" ({reason})" if reason else "")
        case EventType.SIGN_IN if event.outcome == Outcome.PENDING:
            what = "Right password; a second step was asked for"
        case EventType.SIGN_IN:
            what = "Signed in" + _SIGN_IN_HOW.get(str(detail.get("method")), "")
        case EventType.SECOND_STEP:
            step = "Second step" + (f" with {_METHODS[detail['method']]}" if detail.get("method") in _METHODS else "")
            what = step + (" failed" if event.outcome == Outcome.FAILURE else " passed")
        case EventType.CONSENT_GIVEN:
            what = f"Gave {app} access"
        case EventType.AUTHORIZATION_REVOKED:
            what = (f"Access of {app} revoked: a refresh token was used twice" if detail.get("reason") == "reuse"
                    else f"Access of {app} revoked")
        case EventType.SESSION_ENDED:
            ended = detail.get("ended")
            what = ("Signed out" if ended == "this" else f"Ended {detail.get('count', 0)} other sessions"
                    if ended == "others" else "Ended a session")
        case EventType.APP_CREATED:
            what = f"App {app} created"
        case EventType.SECRET_ROTATED:
            what = f"New {'webhook' if detail.get('secret') == 'webhook' else 'client'} secret for {app}"
        case EventType.CLIENT_REGISTERED:
            what = f"App {app} registered itself"
        case EventType.KEY_ROTATED:
            what = ("Master key rotated: stored secrets sealed anew" if detail.get("step") == "reseal"
                    else f"Signing key {detail.get('kid', '')} {detail.get('step', 'rotate')}d".replace("  ", " "))
        case _:
            what = next((text for kind, text in _FIXED.items() if kind == event.type), event.type)
    return what + by + (f" from {origin}" if origin else "")

"""The mail outbox (contract 18): messages queued by the flows, then composed and sent by the mailer."""

from __future__ import annotations

from sqlalchemy import Connection, Select, delete, func, or_, select, update
from sqlalchemy import insert as sql_insert

from lbauth.storage.models import mail_messages
from lbauth.storage.records import MailMessage
from lbauth.storage.repo import shaped

_MESSAGES = shaped(MailMessage, select(mail_messages))


def insert(conn: Connection, *, message_id: str, kind: str, recipient: str, params_sealed: str, now: int) -> None:
    """A new message: pending, due now."""
    conn.execute(sql_insert(mail_messages).values(
        id=message_id, kind=kind, recipient=recipient, params_sealed=params_sealed, letter_sealed=None,
        status="pending", attempts=0, round_attempts=0, next_attempt_at=now, created_at=now))


def _due(now: int) -> Select[tuple[str]]:
    return (select(mail_messages.c.id)
            .where(mail_messages.c.status == "pending", mail_messages.c.next_attempt_at <= now,
                   or_(mail_messages.c.lease_until.is_(None), mail_messages.c.lease_until < now)))


def any_due(conn: Connection, now: int) -> bool:
    """A cheap read first, so an idle mailer never takes the write lock."""
    return conn.execute(_due(now).limit(1)).first() is not None


def claim_due(conn: Connection, now: int, lease_until: int, limit: int) -> list[MailMessage]:
    """Lease up to `limit` due messages, oldest due first. Concurrent claimers never get the same
    message: PostgreSQL skips rows another transaction has locked (FOR UPDATE SKIP LOCKED); SQLite
    runs one writer at a time (BEGIN IMMEDIATE)."""
    due = (_due(now).order_by(mail_messages.c.next_attempt_at, mail_messages.c.created_at)
           .limit(limit).with_for_update(skip_locked=True))
    ids = list(conn.execute(due).scalars())
    if not ids:
        return []
    conn.execute(update(mail_messages).where(mail_messages.c.id.in_(ids)).values(lease_until=lease_until))
    return [MailMessage(*row) for row in conn.execute(_MESSAGES.where(mail_messages.c.id.in_(ids))
                                                      .order_by(mail_messages.c.next_attempt_at,
                                                                mail_messages.c.created_at))]


def set_letter(conn: Connection, message_id: str, letter_sealed: str) -> bool:
    """The composed letter, stored before the first attempt: every attempt sends the same one.
    False when the message has a letter already (another claimer composed it first)."""
    done = conn.execute(update(mail_messages).where(mail_messages.c.id == message_id,
                                                    mail_messages.c.letter_sealed.is_(None))
                        .values(letter_sealed=letter_sealed))
    return done.rowcount == 1


def settle(conn: Connection, message_id: str, *, attempts: int, round_attempts: int, last_error: str | None,
           next_attempt_at: int | None, status: str | None = None, sent_at: int | None = None) -> None:
    """An attempt's outcome, and the lease released. `status` and `sent_at` are written only when
    given: a retry stays pending."""
    outcome: dict[str, object] = {"status": status} if status is not None else {}
    if sent_at is not None:
        outcome["sent_at"] = sent_at
    conn.execute(update(mail_messages).where(mail_messages.c.id == message_id).values(
        attempts=attempts, round_attempts=round_attempts, last_error=last_error, lease_until=None,
        next_attempt_at=next_attempt_at, **outcome))


def by_id(conn: Connection, message_id: str) -> MailMessage | None:
    row = conn.execute(_MESSAGES.where(mail_messages.c.id == message_id)).first()
    return MailMessage(*row) if row is not None else None


def listed(conn: Connection, *, status: str | None = None, limit: int = 500) -> list[MailMessage]:
    """Newest first."""
    query = _MESSAGES.order_by(mail_messages.c.created_at.desc(), mail_messages.c.id).limit(limit)
    if status is not None:
        query = query.where(mail_messages.c.status == status)
    return [MailMessage(*row) for row in conn.execute(query)]


def requeue(conn: Connection, message_id: str, now: int) -> None:
    """Pending again, due now, with a fresh round of the retry schedule; the letter stays."""
    conn.execute(update(mail_messages).where(mail_messages.c.id == message_id)
                 .values(status="pending", next_attempt_at=now, round_attempts=0, lease_until=None))


def pending_count(conn: Connection) -> int:
    """How many messages wait to be sent."""
    return conn.execute(select(func.count()).where(mail_messages.c.status == "pending")).scalar_one()


def sealed_params(conn: Connection) -> list[tuple[str, str]]:
    """(message id, sealed params) of every message, for master key rotation (core/crypto/reseal.py)."""
    return [(i, sealed) for i, sealed in conn.execute(select(mail_messages.c.id, mail_messages.c.params_sealed))]


def reseal_params(conn: Connection, message_id: str, sealed: str) -> None:
    conn.execute(update(mail_messages).where(mail_messages.c.id == message_id).values(params_sealed=sealed))


def sealed_letters(conn: Connection) -> list[tuple[str, str]]:
    """(message id, sealed letter) of every composed message, for master key rotation."""
    return [(i, sealed) for i, sealed in conn.execute(select(mail_messages.c.id, mail_messages.c.letter_sealed)
                                                      .where(mail_messages.c.letter_sealed.is_not(None)))]


def reseal_letter(conn: Connection, message_id: str, sealed: str) -> None:
    conn.execute(update(mail_messages).where(mail_messages.c.id == message_id).values(letter_sealed=sealed))


def delete_settled_before(conn: Connection, before: int) -> int:
    """Messages sent, dropped or failed that were queued before `before`: none is needed any more."""
    return conn.execute(delete(mail_messages).where(mail_messages.c.status != "pending",
                                                    mail_messages.c.created_at < before)).rowcount

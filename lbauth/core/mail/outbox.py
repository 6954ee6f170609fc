"""The mail outbox (contract 18): the flows queue a message in the same transaction as the change
it reports; every server process's mailer (lbauth.mailer) claims it, composes it once, and sends
it at least once, with retries, like the webhook outbox (lbauth.core.clients.outbox).

What a flow asks for (`params`) and the composed letter (which holds the message's one link) are
both sealed under the master key. The letter is stored before the first attempt: every attempt
sends the same letter, with the same Message-ID, and composing (which may make a link token)
happens once. This module decides what to store and what each outcome means; it sends nothing.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from urllib.parse import urlsplit

from lbauth.clock import Clock
from lbauth.core.clients.outbox import retry_delay
from lbauth.core.crypto import opaque
from lbauth.core.crypto.masterkey import MasterKeys
from lbauth.errors import NotFound, ValidationFailed
from lbauth.storage import Connection
from lbauth.storage.db import Database
from lbauth.storage.records import MailMessage
from lbauth.storage.repo import mail as repo

STATUSES = ("pending", "sent", "failed", "dropped")
TEST_KIND = "test"
# One address, no display name, nothing that could end a header line.
_ADDRESS = re.compile(r"^[^@\s<>,;\"]{1,64}@[^@\s<>,;\"]{1,255}$")


@dataclass(frozen=True)
class Letter:
    """A composed message. `link` is the one link it holds (logged in development, so that a
    person trying lbauth without SMTP can follow it)."""
    subject: str
    text: str
    html: str
    link: str | None = None


@dataclass(frozen=True)
class MailRequest:
    """What a flow queued, as its composer receives it."""
    id: str
    kind: str
    recipient: str
    params: dict
    created_at: int


# None: nothing to send after all (say, the account it was for is gone); the message is dropped.
Composer = Callable[[MailRequest], Awaitable[Letter | None]]


def params_purpose(message_id: str) -> str:
    return f"mail params {message_id}"


def letter_purpose(message_id: str) -> str:
    return f"mail letter {message_id}"


def check_address(recipient: str) -> str:
    if not _ADDRESS.match(recipient):
        raise ValidationFailed("recipient must be one email address", field="recipient")
    return recipient


def queue(conn: Connection, master_keys: MasterKeys, *, kind: str, recipient: str, params: dict, now: int) -> str:
    """Inside the caller's transaction: the message commits, or not, with the change it reports.
    Returns its id (`msg_...`)."""
    message_id = opaque.new_id("msg_")
    sealed = master_keys.seal(json.dumps(params, separators=(",", ":")).encode(), params_purpose(message_id))
    repo.insert(conn, message_id=message_id, kind=kind, recipient=check_address(recipient), params_sealed=sealed,
                now=now)
    return message_id


class Outcome(Enum):
    SENT = "sent"
    RETRY = "retry"  # connection failure, timeout, a 4xx answer, composing failed
    FAILED = "failed"  # a permanent refusal (5xx) of the recipient or the message, or nothing to send it with
    DROPPED = "dropped"  # its composer found nothing to send


@dataclass(frozen=True)
class Claimed:
    id: str
    kind: str
    recipient: str
    params_sealed: str
    letter_sealed: str | None
    created_at: int
    attempts: int
    round_attempts: int


async def claim_due(db: Database, clock: Clock, limit: int, lease_seconds: int) -> list[Claimed]:
    """Lease up to `limit` messages that are due."""
    now = int(clock.now())
    if not await db.read(repo.any_due, now):
        return []
    messages = await db.transaction(repo.claim_due, now, now + lease_seconds, limit)
    return [Claimed(m.id, m.kind, m.recipient, m.params_sealed, m.letter_sealed, m.created_at, m.attempts,
                    m.round_attempts) for m in messages]


def request_of(master_keys: MasterKeys, message: Claimed) -> MailRequest:
    """What was queued, opened (MasterKeyError when no configured key opens it)."""
    params = json.loads(master_keys.open(message.params_sealed, params_purpose(message.id)))
    return MailRequest(message.id, message.kind, message.recipient, params, message.created_at)


def letter_of(master_keys: MasterKeys, message_id: str, sealed: str) -> Letter:
    return Letter(**json.loads(master_keys.open(sealed, letter_purpose(message_id))))


async def keep_letter(db: Database, master_keys: MasterKeys, message_id: str, letter: Letter) -> Letter:
    """Store the composed letter before the first attempt, and return the one to send: ours, or
    the one another process stored first (a lease that ran out while composing)."""
    sealed = master_keys.seal(json.dumps(asdict(letter)).encode(), letter_purpose(message_id))

    def work(conn: Connection) -> str | None:
        if repo.set_letter(conn, message_id, sealed):
            return sealed
        stored = repo.by_id(conn, message_id)
        return stored.letter_sealed if stored is not None else None
    kept = await db.transaction(work)
    return letter_of(master_keys, message_id, kept) if kept and kept != sealed else letter


async def record(db: Database, clock: Clock, message: Claimed, outcome: Outcome, *, error: str | None,
                 schedule: Sequence[int], rng: random.Random | None = None) -> Outcome:
    """What an attempt (or composing) came to: sent, pending for a retry per `schedule`, or
    failed or dropped, visible and redeliverable. Returns the outcome, FAILED once retries are spent."""
    now = int(clock.now())
    round_attempts = message.round_attempts + 1
    status, next_attempt_at, sent_at = None, None, None
    if outcome is Outcome.SENT:
        status, sent_at = "sent", now
    elif outcome is Outcome.RETRY and (delay := retry_delay(schedule, round_attempts, None, rng)):
        next_attempt_at = now + delay  # still pending
    elif outcome is Outcome.DROPPED:
        status = "dropped"
    else:
        status, outcome = "failed", Outcome.FAILED
    await db.transaction(repo.settle, message.id, attempts=message.attempts + 1, round_attempts=round_attempts,
                         last_error=error, next_attempt_at=next_attempt_at, status=status, sent_at=sent_at)
    return outcome


def message_id_header(message_id: str, mail_from: str) -> str:
    """The Message-ID of every attempt to send `message_id` (RFC 5322 3.6.4): the same at each
    retry, so a receiver that got it twice can tell."""
    domain = mail_from.rstrip(">").rpartition("@")[2] or "localhost"
    return f"<{message_id}@{domain}>"


def test_composer(auth_url: str) -> Composer:
    """The built-in `test` kind (`lbauth mail test --to`): a short message with no link, to check
    that mail from this site reaches people."""
    site = urlsplit(auth_url).hostname or auth_url

    async def compose(request: MailRequest) -> Letter:
        return Letter(
            subject=f"Test message from {site}",
            text=f"This is a test message from the sign-in service at {auth_url}.\n\n"
                 "If you received it, mail from this site reaches you. You need not do anything.\n",
            html=f"<p>This is a test message from the sign-in service at <strong>{_html(auth_url)}</strong>.</p>"
                 "<p>If you received it, mail from this site reaches you. You need not do anything.</p>")
    return compose


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


async def send_test(db: Database, clock: Clock, master_keys: MasterKeys, recipient: str) -> str:
    """Queue a `test` message to `recipient`; the server's mailer sends it. Returns its id."""
    check_address(recipient)
    return await db.transaction(lambda conn: queue(conn, master_keys, kind=TEST_KIND, recipient=recipient,
                                                   params={}, now=int(clock.now())))


async def list_messages(db: Database, *, status: str | None = None) -> list[MailMessage]:
    """The messages, newest first."""
    if status is not None and status not in STATUSES:
        raise ValidationFailed(f"status must be one of {', '.join(STATUSES)}")
    return await db.read(lambda conn: repo.listed(conn, status=status))


async def redeliver(db: Database, clock: Clock, message_id: str) -> MailMessage:
    """Queue a message again, now, with a fresh round of the retry schedule. A composed message
    sends the same letter again (its link may since have been used or have expired)."""
    now = int(clock.now())

    def work(conn: Connection) -> MailMessage:
        if repo.by_id(conn, message_id) is None:
            raise NotFound("No such mail message.")
        repo.requeue(conn, message_id, now)
        requeued = repo.by_id(conn, message_id)
        assert requeued is not None  # in this transaction, since the read above
        return requeued
    return await db.transaction(work)


async def pending_count(db: Database) -> int:
    """Messages waiting to be sent, for /metrics."""
    return await db.read(repo.pending_count)


RETENTION_DAYS = 30


async def forget_old(db: Database, clock: Clock, days: int = RETENTION_DAYS) -> int:
    """Delete what is settled (sent, dropped, failed) and older than `days`: a message's addresses
    and words are kept no longer than an operator may need them (`lbauth mail list`)."""
    before = int(clock.now()) - days * 86400
    return await db.transaction(lambda conn: repo.delete_settled_before(conn, before), single_statement=True)

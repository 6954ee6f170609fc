"""Sending the mail outbox (contract 18): a Tornado periodic callback claims due messages, composes
each one once, and sends it, by SMTP when LBAUTH_SMTP_URL is set, else (development only) as an
`.eml` file under `{data dir}/mail/` with its link logged.

- At least once, and once in the usual case: a message is leased while it is being sent; it is
  marked sent as soon as the SMTP server has accepted it. A process that dies holding it leaves
  it to another claim once the lease runs out.
- SMTP: `smtp://` uses STARTTLS whenever the server offers it, `smtps://` implicit TLS. Connection
  failures, timeouts and 4xx answers are retried per LBAUTH_MAIL_RETRY_SCHEDULE; a 5xx refusal of
  the recipient or of the message fails it at once. The password (from the URL or
  LBAUTH_SMTP_PASSWORD_FILE) and the letter (it holds a link) never reach a log or `lastError`.
- The database away: claims back off as the webhook deliverer's do (lbauth.delivery).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import os
import time
from collections.abc import Mapping
from email.message import EmailMessage
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import aiosmtplib

from lbauth import logs, tracing
from lbauth.core.crypto.masterkey import MasterKeyError
from lbauth.core.mail import outbox
from lbauth.core.mail.outbox import Composer, Letter, Outcome
from lbauth.delivery import CLAIM_BACKOFF_FIRST, CLAIM_BACKOFF_MAX, Outgoing
from lbauth.errors import ServerUnavailable
from lbauth.services import Services

if TYPE_CHECKING:
    from lbauth import otel

log = logging.getLogger("lbauth.mail")

SMTP_TIMEOUT = 10  # seconds, for each step of the SMTP conversation
SEND_DEADLINE = 30  # seconds for a whole attempt: connect, TLS, login, the message
LEASE_SECONDS = SEND_DEADLINE + 30  # a claimed message is ours this long: composing and sending, then recording
MAX_IN_FLIGHT = 8
DEVELOPMENT_LINK = "development mail: follow its link to continue"  # the one log line that shows a link


class Mailer(Outgoing):
    """`run_once` (the periodic callback), `flush` and `drain` (tests, tools, shutdown), `close`."""

    def __init__(self, services: Services, composers: Mapping[str, Composer]) -> None:
        self.services = services
        self.composers = composers  # read at each message: a flow may add its composer after the start
        self._built_in: dict[str, Composer] = {outbox.TEST_KIND: outbox.test_composer(services.settings.auth_url)}
        self._tasks: set[asyncio.Task] = set()
        self._claim_lock = asyncio.Lock()
        self._backoff = 0.0
        self._paused_until = 0.0

    async def run_once(self) -> int:
        """Claim what this process has room for and start sending it; returns how many."""
        room = MAX_IN_FLIGHT - len(self._tasks)
        if room <= 0 or self._claim_lock.locked() or time.monotonic() < self._paused_until:
            return 0
        s = self.services
        async with self._claim_lock:
            try:
                claimed = await outbox.claim_due(s.db, s.clock, room, LEASE_SECONDS)
            except ServerUnavailable as exc:
                self._back_off(exc)
                return 0
            if self._backoff:
                logs.event(log, "mail claims resumed: the database answers again")
                self._backoff = 0.0
            for message in claimed:
                task = asyncio.ensure_future(self._deliver(message))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        return len(claimed)

    def _back_off(self, exc: ServerUnavailable) -> None:
        self._backoff = min(self._backoff * 2 or CLAIM_BACKOFF_FIRST, CLAIM_BACKOFF_MAX)
        self._paused_until = time.monotonic() + self._backoff
        cause = exc.__cause__
        logs.event(log, "mail claims paused: the database is unavailable", level=logging.WARNING,
                   retryIn=self._backoff, error=type(cause).__name__ if cause else type(exc).__name__)

    def close(self) -> None:
        """Nothing is held open between messages: each attempt has its own SMTP connection."""

    async def _deliver(self, message: outbox.Claimed) -> None:
        s = self.services
        try:
            outcome, error = await self._attempt(message)
            outcome = await outbox.record(s.db, s.clock, message, outcome, error=error,
                                          schedule=s.settings.mail_retry_schedule)
            s.metrics.mail_deliveries.labels(outcome.value).inc()
            logs.event(log, "mail attempt", messageId=message.id, kind=message.kind, outcome=outcome.value,
                       error=error)
        except ServerUnavailable:
            logs.event(log, "mail attempt not recorded: the database is unavailable; the message is tried again "
                       "when its lease ends", level=logging.WARNING, messageId=message.id)
        except Exception:  # noqa: BLE001 - the lease runs out and the message is tried again
            log.exception("mail message %s could not be sent or recorded", message.id)

    async def _attempt(self, message: outbox.Claimed) -> tuple[Outcome, str | None]:
        """Compose (once), then send. ServerUnavailable passes: the lease brings the message back."""
        s = self.services
        try:
            if message.letter_sealed is not None:
                letter: Letter | None = outbox.letter_of(s.master_keys, message.id, message.letter_sealed)
            else:
                composer = self.composers.get(message.kind) or self._built_in.get(message.kind)
                if composer is None:
                    return Outcome.FAILED, f"no composer for mail of kind {message.kind!r} in this server"
                try:
                    letter = await composer(outbox.request_of(s.master_keys, message))
                except (ServerUnavailable, MasterKeyError):
                    raise
                except Exception as exc:  # noqa: BLE001 - a bug or a passing failure; retried, and logged
                    log.exception("composing mail message %s failed", message.id)
                    return Outcome.RETRY, f"composing failed: {type(exc).__name__}"
                if letter is None:
                    return Outcome.DROPPED, None
                letter = await outbox.keep_letter(s.db, s.master_keys, message.id, letter)
        except MasterKeyError:
            return Outcome.FAILED, "the message cannot be opened with the configured master keys"
        mime = self._mime(message, letter)
        if s.settings.smtp_url:
            if tracing.active is None:
                return await self._smtp(mime, message.recipient)
            return await self._traced_smtp(mime, message, tracing.active)
        self._write_eml(message, mime, letter)
        return Outcome.SENT, None

    def _mime(self, message: outbox.Claimed, letter: Letter) -> EmailMessage:
        """multipart/alternative: the plain text first, the HTML preferred by readers that show it."""
        s = self.services.settings
        mime = EmailMessage()
        mime["From"] = s.mail_from
        mime["To"] = message.recipient
        mime["Subject"] = letter.subject
        mime["Date"] = email.utils.formatdate(self.services.clock.now(), usegmt=True)
        mime["Message-ID"] = outbox.message_id_header(message.id, s.mail_from)
        mime.set_content(letter.text)
        mime.add_alternative(letter.html, subtype="html")
        return mime

    async def _smtp(self, mime: EmailMessage, recipient: str) -> tuple[Outcome, str | None]:
        url = urlsplit(self.services.settings.smtp_url or "")
        implicit_tls = url.scheme == "smtps"
        username = unquote(url.username) if url.username else None
        password = self._password(url.password)
        try:
            async with asyncio.timeout(SEND_DEADLINE):
                await aiosmtplib.send(
                    mime, recipients=[recipient], hostname=url.hostname,
                    port=url.port or (465 if implicit_tls else 587),
                    username=username, password=password if username else None, timeout=SMTP_TIMEOUT,
                    use_tls=implicit_tls, start_tls=False if implicit_tls else None)  # None: STARTTLS when offered
        except Exception as exc:  # noqa: BLE001 - every failure is an outcome
            return _classify(exc), _error_text(exc, password)
        return Outcome.SENT, None

    async def _traced_smtp(self, mime: EmailMessage, message: outbox.Claimed,
                           traced: otel.Tracing) -> tuple[Outcome, str | None]:
        """The SMTP attempt in a CLIENT span (tracing on): the server and the kind of message, never
        the recipient or the letter (it holds a link)."""
        url = urlsplit(self.services.settings.smtp_url or "")
        attributes = {"server.address": url.hostname or "", "server.port": url.port or (465 if url.scheme == "smtps"
                                                                                       else 587),
                      "network.protocol.name": "smtp", "lbauth.mail.kind": message.kind,
                      "lbauth.mail.message_id": message.id}
        with traced.client_span("SMTP send", attributes) as span:
            outcome, error = await self._smtp(mime, message.recipient)
            span.set_attribute("lbauth.mail.outcome", outcome.value)
            if outcome is not Outcome.SENT:
                traced.failed_as(span, "smtp_" + outcome.value)
            return outcome, error

    def _password(self, in_url: str | None) -> str | None:
        if in_url is not None:
            return unquote(in_url)
        path = self.services.settings.smtp_password_file
        return path.read_text().strip() if path is not None else None

    def _write_eml(self, message: outbox.Claimed, mime: EmailMessage, letter: Letter) -> None:
        """Development without SMTP: the message as a file a mail reader opens, and its link logged."""
        folder = Path(self.services.settings.data_dir) / "mail"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(message.created_at))
        path = folder / f"{stamp}-{message.id}.eml"
        partial = path.with_suffix(".part")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds a link: the owner's only
        with os.fdopen(fd, "wb") as out:
            out.write(mime.as_bytes())
        partial.replace(path)
        if letter.link and self.services.settings.development:
            logs.event(log, DEVELOPMENT_LINK, to=message.recipient, file=str(path), link=letter.link)
        else:
            logs.event(log, "development mail written", to=message.recipient, file=str(path))


def _classify(exc: BaseException) -> Outcome:
    """A 5xx refusal of the recipient or the message is final; the rest (no connection, timeouts,
    4xx, a refused login or sender, which an operator can fix) is retried."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        codes = [refused.code for refused in exc.recipients]
        return Outcome.FAILED if codes and all(code >= 500 for code in codes) else Outcome.RETRY
    if isinstance(exc, aiosmtplib.SMTPRecipientRefused | aiosmtplib.SMTPDataError) and exc.code >= 500:
        return Outcome.FAILED
    return Outcome.RETRY


def _error_text(exc: BaseException, password: str | None) -> str:
    """Why an attempt failed, for `lastError`: the exception's kind and the server's answer, never
    the password."""
    if isinstance(exc, aiosmtplib.SMTPRecipientsRefused):
        detail = "; ".join(f"{r.code} {r.message}" for r in exc.recipients)
    elif isinstance(exc, aiosmtplib.SMTPResponseException):
        detail = f"{exc.code} {exc.message}"
    else:
        detail = str(exc)
    text = f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__
    if password:
        text = text.replace(password, "[redacted]")
    return text[:500]

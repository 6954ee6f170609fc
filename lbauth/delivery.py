"""Webhook delivery (spec section 6, contract section 10): a Tornado periodic callback claims due
outbox events and POSTs each one, signed afresh, to its app's webhook URL.

- At least once: an event is leased while in flight; if the process dies the lease runs out and
  another claim picks it up. Concurrent deliverers never hold the same event.
- Bounded: at most `max_in_flight` deliveries per process and `per_app` per app, so a slow
  receiver cannot pile up work; deliveries are async I/O and never hold up the API.
- Redirects are never followed. In production the address a webhook host resolves to is checked
  when connecting: every address that is not globally routable is refused (lbauth/outbound.py).
- The database away: claims back off (0.5 s, doubling, at most CLAIM_BACKOFF_MAX seconds), with
  one warning per back-off and no traceback; the first claim that succeeds resumes the usual pace.
"""

from __future__ import annotations

import asyncio
import collections
import email.utils
import logging
import time

from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from lbauth import logs, tracing, webhooks
from lbauth.core.clients import outbox
from lbauth.core.clients.metadata import webhook_secret_purpose
from lbauth.core.crypto.masterkey import MasterKeyError
from lbauth.errors import ServerUnavailable
from lbauth.outbound import ForbiddenAddress, PublicOnlyResolver
from lbauth.services import Services

log = logging.getLogger("lbauth.webhooks")

CLAIM_BACKOFF_FIRST = 0.5
CLAIM_BACKOFF_MAX = 5.0  # the database's return is noticed within this long


def lease_seconds(timeout: int) -> int:
    """How long a claimed event is ours: the attempt's timeout twice over (connect, then answer),
    plus time to record the outcome. A process that dies holding it delays the event this long."""
    return 2 * timeout + 5


def _discard(chunk: bytes) -> None:
    """The receiver's body is not read."""


def retry_after_seconds(value: str | None, now: float) -> int | None:
    """Retry-After as delay-seconds or an HTTP date (RFC 9110 10.2.3)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return int(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0, int(when.timestamp() - now))


class Outgoing:
    """What the webhook deliverer and the mailer share: sends under way as tasks, claimed by one
    `run_once` at a time."""

    _tasks: set[asyncio.Task]
    _claim_lock: asyncio.Lock

    async def run_once(self) -> int:
        raise NotImplementedError

    async def drain(self) -> None:
        """Wait for the sends under way (shutdown, tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def flush(self) -> None:
        """Send everything due now, including the retries that come due meanwhile (tests, tools)."""
        while True:
            while self._claim_lock.locked():  # a claim under way (the periodic one) finishes first
                await asyncio.sleep(0.001)
            if not await self.run_once() and not self._tasks and not self._claim_lock.locked():
                return
            await self.drain()


class Deliverer(Outgoing):
    def __init__(self, services: Services, *, max_in_flight: int = 32, per_app: int = 4) -> None:
        self.services = services
        self.max_in_flight = max_in_flight
        self.per_app = per_app
        resolver = None if services.settings.development else PublicOnlyResolver()
        self.http = AsyncHTTPClient(force_instance=True, max_clients=max_in_flight, resolver=resolver)
        self._tasks: set[asyncio.Task] = set()
        self._by_app: collections.Counter[str] = collections.Counter()
        self._claim_lock = asyncio.Lock()  # one claim at a time per process
        self._backlog = False  # the last claim found work: more may be due
        self._look_again = False  # asked for while a claim was under way
        self._backoff = 0.0  # seconds of the current back-off; 0 while the database answers
        self._paused_until = 0.0  # monotonic time before which no claim is tried

    async def run_once(self) -> int:
        """Claim what this process has room for and start delivering it; returns how many. A call
        made while a claim is under way asks that claim to look once more, and returns 0."""
        self._look_again = True
        if self._claim_lock.locked() or time.monotonic() < self._paused_until:
            return 0
        started = 0
        async with self._claim_lock:
            while self._look_again:
                self._look_again = False
                room = self.max_in_flight - len(self._tasks)
                if room <= 0:
                    break
                try:
                    claimed = await outbox.claim_due(self.services.db, self.services.clock, room,
                                                     lease_seconds(self.services.settings.webhook_timeout),
                                                     per_app=self.per_app, in_flight=self._by_app)
                except ServerUnavailable as exc:
                    self._back_off(exc)
                    break
                if self._backoff:
                    logs.event(log, "webhook claims resumed: the database answers again")
                    self._backoff = 0.0
                for event in claimed:
                    self._by_app[event.app_id] += 1
                    task = asyncio.ensure_future(self._deliver(event))
                    self._tasks.add(task)
                    task.add_done_callback(self._finished)
                started += len(claimed)
                # More may be due: what was found, or what an app at its limit could not take.
                self._backlog = bool(claimed) or max(self._by_app.values(), default=0) >= self.per_app
        return started

    def _back_off(self, exc: ServerUnavailable) -> None:
        """The database is away: no claim for a while, longer each time it is still away."""
        self._backoff = min(self._backoff * 2 or CLAIM_BACKOFF_FIRST, CLAIM_BACKOFF_MAX)
        self._paused_until = time.monotonic() + self._backoff
        self._backlog = False
        cause = exc.__cause__
        logs.event(log, "webhook claims paused: the database is unavailable", level=logging.WARNING,
                   retryIn=self._backoff, error=type(cause).__name__ if cause else type(exc).__name__)

    def _finished(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if self._backlog:  # a slot is free: claim again now, not at the next tick
            asyncio.ensure_future(self._claim_more())

    async def _claim_more(self) -> None:
        try:
            await self.run_once()
        except Exception as exc:  # noqa: BLE001 - the periodic callback tries again
            log.warning("webhook claim failed: %s", type(exc).__name__)

    async def _deliver(self, event: outbox.Claimed) -> None:
        s = self.services
        try:
            status, error, retry_after, latency_ms, forced = await self._post(event)
            outcome = await outbox.record(s.db, s.clock, event, status=status, latency_ms=latency_ms, error=error,
                                          retry_after=retry_after, schedule=s.settings.webhook_retry_schedule,
                                          forced=forced)
            s.metrics.deliveries.labels(outcome.value).inc()
            logs.event(log, "webhook attempt", eventId=event.event_id, clientId=event.client_id, status=status,
                       outcome=outcome.value, ms=latency_ms, error=error)
        except ServerUnavailable:  # the database went away meanwhile: nothing an operator can fix here
            logs.event(log, "webhook attempt not recorded: the database is unavailable; "
                       "the event is tried again when its lease ends", level=logging.WARNING, eventId=event.event_id)
        except Exception:  # noqa: BLE001 - the lease runs out and the event is tried again
            log.exception("webhook delivery of %s could not be recorded", event.event_id)
        finally:
            self._by_app[event.app_id] -= 1

    async def _post(self, event: outbox.Claimed):
        s = self.services
        try:
            secret = s.master_keys.open(event.secret_sealed, webhook_secret_purpose(event.app_id)).decode()
        except MasterKeyError:
            return None, "the webhook secret cannot be opened with the configured master keys", None, 0, \
                outbox.Outcome.FAILED
        body = event.payload.encode()
        timestamp = str(int(s.clock.now()))  # signed afresh at every attempt
        request = HTTPRequest(
            event.url, method="POST", body=body, follow_redirects=False,
            connect_timeout=s.settings.webhook_timeout, request_timeout=s.settings.webhook_timeout,
            streaming_callback=_discard,  # only the status matters; a large answer is not an error
            headers={"Content-Type": "application/json", "X-Service-Event-Id": event.event_id,
                     "X-Service-Timestamp": timestamp, "X-Service-Signature": webhooks.sign(secret, timestamp, body),
                     "User-Agent": "lbauth-webhooks/1"})
        started = time.monotonic()
        if tracing.active is None:
            response, error = await self._fetch(request)
        else:  # a CLIENT span in the trace of the change that queued the event; the receiver gets it too
            traced = tracing.active
            attributes = {**traced.outbound_attributes(event.url, "POST"), "lbauth.webhook.event_id": event.event_id,
                          "lbauth.client_id": event.client_id}  # where it goes: scheme, host, port (not the path)
            with traced.client_span("POST webhook", attributes, traceparent=event.traceparent,
                                    headers=request.headers) as span:
                response, error = await self._fetch(request)
                traced.http_outcome(span, response.code if response is not None and error is None else None, error)
        latency_ms = int((time.monotonic() - started) * 1000)
        if response is None or error is not None:  # no HTTP answer: timeout, refused, reset, forbidden address
            forced = outbox.Outcome.FAILED if isinstance(error, ForbiddenAddress) else None
            return None, f"{type(error).__name__}: {error}"[:500], None, latency_ms, forced
        retry_after = retry_after_seconds(response.headers.get("Retry-After"), s.clock.now())
        return response.code, None, retry_after, latency_ms, None

    async def _fetch(self, request: HTTPRequest):
        try:
            response = await self.http.fetch(request, raise_error=False)
            return response, response.error if response.code == 599 else None
        except Exception as exc:  # noqa: BLE001 - timeouts and refused connections raise even so
            return None, exc

    def close(self) -> None:
        self.http.close()

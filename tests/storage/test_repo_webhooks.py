"""The webhook outbox (contract section 10): due events are leased, never to two claimers at once,
within each app's share; an attempt's outcome settles its event."""

from __future__ import annotations

from lbauth.storage.db import Database
from lbauth.storage.records import WebhookAttempt, WebhookEvent
from lbauth.storage.repo import webhooks as repo
from tests.storage.conftest import NOW, Granted, add_app


async def _event(db: Database, event_id: str, app_id: str, *, created_at: int = NOW) -> None:
    await db.transaction(repo.insert_event, event_id=event_id, app_id=app_id, event_type="authorization.revoked",
                         reason="user_revoked", asu="asu_1", payload=f'{{"eventId":"{event_id}"}}',
                         status="pending", next_attempt_at=created_at, last_error=None, now=created_at)


async def test_due_events_are_leased_until_the_lease_ends(db: Database, granted: Granted) -> None:
    for i in range(3):
        await _event(db, f"evt_{i}", granted.app.id, created_at=NOW + i)
    assert await db.read(repo.any_due, NOW - 1) is False  # none due yet
    assert await db.read(repo.any_due, NOW + 5) is True

    first = await db.transaction(repo.claim_due, NOW + 5, NOW + 35, 2, 10, {})
    second = await db.transaction(repo.claim_due, NOW + 6, NOW + 36, 10, 10, {})
    third = await db.transaction(repo.claim_due, NOW + 7, NOW + 37, 10, 10, {})

    assert sorted(e.id for e in first) == ["evt_0", "evt_1"]  # the oldest, `limit` of them
    assert all(isinstance(e, WebhookEvent) and e.lease_until == NOW + 35 for e in first)
    assert (first[0].client_id, first[0].webhook_url) == (granted.app.client_id, granted.app.webhook_url)
    assert [e.id for e in second] == ["evt_2"]
    assert third == []
    assert await db.read(repo.any_due, NOW + 7) is False
    # A claimer that died: its lease runs out and the events are due again.
    expired = await db.transaction(repo.claim_due, NOW + 36, NOW + 66, 10, 10, {})
    assert sorted(e.id for e in expired) == ["evt_0", "evt_1"]


async def test_each_app_gets_its_share(db: Database, granted: Granted) -> None:
    other = await add_app(db, granted.user, app_id="app_2", client_id="cid_2")
    no_hook = await add_app(db, granted.user, app_id="app_3", client_id="cid_3", webhook_url=None)
    for i in range(3):
        await _event(db, f"evt_a{i}", granted.app.id, created_at=NOW + i)
        await _event(db, f"evt_b{i}", other.id, created_at=NOW + i)
    await _event(db, "evt_c0", no_hook.id)

    claimed = await db.transaction(repo.claim_due, NOW + 5, NOW + 35, 10, 2, {granted.app.id: 1})

    # app_1 has one delivery in flight, so one more; app_2 two; app_3 has no webhook URL.
    assert sorted(e.id for e in claimed) == ["evt_a0", "evt_b0", "evt_b1"]
    full = await db.transaction(repo.claim_due, NOW + 5, NOW + 35, 10, 2, {granted.app.id: 2, other.id: 2})
    assert full == []


async def test_an_attempt_settles_its_event(db: Database, granted: Granted) -> None:
    await _event(db, "evt_1", granted.app.id)
    await db.transaction(repo.claim_due, NOW, NOW + 30, 10, 10, {})

    await db.transaction(repo.insert_attempt, event_id="evt_1", attempted_at=NOW + 1, status=503, latency_ms=12,
                         error="HTTP 503")
    await db.transaction(repo.settle_attempt, "evt_1", attempts=1, round_attempts=1, last_status=503,
                         last_error="HTTP 503", next_attempt_at=NOW + 60)
    retry = await db.read(repo.by_id, "evt_1")
    assert retry is not None
    assert (retry.status, retry.attempts, retry.next_attempt_at, retry.lease_until) == ("pending", 1, NOW + 60, None)

    await db.transaction(repo.insert_attempt, event_id="evt_1", attempted_at=NOW + 60, status=200, latency_ms=8,
                         error=None)
    await db.transaction(repo.settle_attempt, "evt_1", attempts=2, round_attempts=2, last_status=200,
                         last_error=None, next_attempt_at=None, status="delivered", delivered_at=NOW + 60)
    await db.transaction(repo.requeue, "evt_1", NOW + 100)
    await db.transaction(repo.settle_attempt, "evt_1", attempts=3, round_attempts=1, last_status=400,
                         last_error="HTTP 400", next_attempt_at=None, status="failed")
    failed = await db.read(repo.by_id, "evt_1")
    assert failed is not None
    assert (failed.status, failed.attempts, failed.round_attempts, failed.delivered_at) == ("failed", 3, 1, NOW + 60)

    attempts = await db.read(repo.attempts, ["evt_1"])
    assert [(a.status, a.latency_ms, a.error) for a in attempts] == [(503, 12, "HTTP 503"), (200, 8, None)]
    assert all(isinstance(a, WebhookAttempt) for a in attempts)
    assert [e.id for e in await db.read(repo.events, app_id=granted.app.id, status="failed")] == ["evt_1"]
    assert await db.read(repo.events, status="pending") == []
    assert await db.read(repo.pending_summary) == (0, None)

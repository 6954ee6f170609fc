"""The `authorization.revoked` webhook delivered to a real receiver on loopback (spec section 6,
contract section 10): signature, payload, headers, and what each answer leads to."""

from __future__ import annotations

import hashlib
import hmac
import json
import re

import pytest
from sqlalchemy import text

from lbauth import webhooks
from lbauth.core.clients import outbox
from lbauth.delivery import ForbiddenAddress, PublicOnlyResolver
from lbauth.handlers.operator_json import attempt_json, event_json
from tests.conftest import arun_cli, start_server
from tests.flow_helpers import full_setup, tokens_for
from tests.receiver import Answer, Receiver

SCHEDULE = (10, 20, 30)
ATTEMPT_TIMEOUT = 5  # seconds: roomy enough that a busy CI machine never times out a loopback answer


@pytest.fixture
async def srv(tmp_path, database_url):
    server = await start_server(tmp_path, database_url, env="development", webhook_timeout=ATTEMPT_TIMEOUT,
                                webhook_retry_schedule=",".join(map(str, SCHEDULE)))
    yield server
    server.client.close()
    await server.running.stop()


async def deliver(server) -> None:
    """Run the server's deliverer until nothing due is left (the periodic callback does the same)."""
    await server.running.deliverer.flush()


async def revoke(server, receiver, **app_options):
    app_options.setdefault("webhook_url", receiver.url)
    setup = await full_setup(server, **app_options)
    tokens = await tokens_for(server, setup)
    asu = (await server.client.get("/api/auth/me", bearer=tokens["accessToken"])).data["appScopedUserId"]
    r = await server.client.delete(f"/api/auth/authorizations/{setup.client_id}", bearer=setup.token)
    assert r.status == 200, r.text
    return setup, asu, r.data["eventId"]


async def event(server, event_id: str) -> dict:
    return next(event_json(e) for e in await outbox.list_events(server.db) if e.id == event_id)


def expected_signature(secret: str, timestamp: str, body: bytes) -> str:
    """Computed here from the spec's words, not with lbauth's helper."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()


async def test_delivery_is_signed_and_shaped_as_the_spec_says(srv, receiver):
    setup, asu, event_id = await revoke(srv, receiver)
    await deliver(srv)
    (request,) = receiver.received
    headers = request.headers
    assert headers["Content-Type"] == "application/json"
    assert headers["X-Service-Event-Id"] == event_id
    assert headers["X-Service-Timestamp"] == str(int(srv.clock.now()))
    assert re.fullmatch(r"[0-9a-f]{64}", headers["X-Service-Signature"])
    assert headers["X-Service-Signature"] == expected_signature(setup.app["webhookSecret"],
                                                                headers["X-Service-Timestamp"], request.body)
    payload = request.payload
    assert set(payload) == {"eventId", "eventType", "occurredAt", "appId", "appScopedUserId", "reason"}
    assert payload["eventId"] == event_id and payload["eventType"] == "authorization.revoked"
    assert payload["appId"] == setup.app["appId"] and payload["appScopedUserId"] == asu
    assert payload["reason"] == "user_revoked"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", payload["occurredAt"])
    webhooks.verify_signature(setup.app["webhookSecret"], headers["X-Service-Timestamp"], request.body,
                              headers["X-Service-Signature"], now=srv.clock.now())
    assert (await event(srv, event_id))["status"] == "delivered"


@pytest.mark.parametrize("answer", [
    Answer(503), Answer(500), Answer(429), Answer(408),
    Answer(302, {"Location": "/elsewhere"}), Answer(301, {"Location": "/elsewhere"}),
], ids=["503", "500", "429", "408", "302", "301"])
async def test_retried_answers_come_again_signed_afresh(srv, receiver, answer):
    receiver.answer(answer)
    setup, _, event_id = await revoke(srv, receiver)
    await deliver(srv)
    assert len(receiver.at("/hook")) == 1 and (await event(srv, event_id))["status"] == "pending"
    srv.clock.advance(SCHEDULE[0] * 1.1 + 1)  # past the first delay and its jitter
    await deliver(srv)
    first, second = receiver.at("/hook")
    assert receiver.at("/elsewhere") == []  # redirects are never followed
    assert first.event_id == second.event_id == event_id and first.body == second.body
    assert first.headers["X-Service-Timestamp"] != second.headers["X-Service-Timestamp"]
    for request in (first, second):
        assert request.headers["X-Service-Signature"] == expected_signature(
            setup.app["webhookSecret"], request.headers["X-Service-Timestamp"], request.body)
    assert (await event(srv, event_id))["status"] == "delivered"


@pytest.mark.parametrize("status", [400, 401, 404, 422])
async def test_other_4xx_stop_that_event(srv, receiver, status):
    receiver.answer(Answer(status))
    _, _, event_id = await revoke(srv, receiver)
    await deliver(srv)
    srv.clock.advance(sum(SCHEDULE) * 2)
    await deliver(srv)
    assert len(receiver.received) == 1
    failed = await event(srv, event_id)
    assert failed["status"] == "failed" and failed["lastStatus"] == status and failed["attempts"] == 1


async def test_410_disables_the_webhook_until_it_is_enabled(srv, receiver, tmp_path, database_url):
    receiver.answer(Answer(410))
    setup, _, event_id = await revoke(srv, receiver)
    await deliver(srv)
    assert (await event(srv, event_id))["status"] == "failed"
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}
    shown = json.loads((await arun_cli("apps", "show", setup.client_id, "--json", env=env)).stdout)
    assert shown["webhookEnabled"] is False

    tested = await arun_cli("apps", "test-webhook", setup.client_id, "--json", env=env)
    test_event = json.loads(tested.stdout)["eventId"]
    srv.clock.advance(60)
    await deliver(srv)
    assert len(receiver.received) == 1  # held while disabled, not lost
    assert (await event(srv, test_event))["status"] == "pending"

    enabled = await arun_cli("apps", "update", setup.client_id, "--enable-webhook", "--json", env=env)
    assert json.loads(enabled.stdout)["webhookEnabled"] is True
    await deliver(srv)
    assert receiver.received[-1].event_id == test_event
    assert (await event(srv, test_event))["status"] == "delivered"


async def test_retry_after_means_not_sooner_than(srv, receiver):
    receiver.answer(Answer(503, {"Retry-After": "120"}))
    _, _, event_id = await revoke(srv, receiver)
    await deliver(srv)
    srv.clock.advance(60)  # past the schedule's 10 s, not past Retry-After
    await deliver(srv)
    assert len(receiver.received) == 1
    srv.clock.advance(61)
    await deliver(srv)
    assert len(receiver.received) == 2 and (await event(srv, event_id))["status"] == "delivered"


async def test_timeout_is_retried(srv, receiver):
    receiver.answer(Answer(200, delay=ATTEMPT_TIMEOUT + 3))  # longer than the attempt timeout
    _, _, event_id = await revoke(srv, receiver)
    await deliver(srv)
    pending = await event(srv, event_id)
    assert pending["status"] == "pending" and pending["lastStatus"] is None
    srv.clock.advance(SCHEDULE[0] * 1.1 + 1)
    await deliver(srv)
    assert (await event(srv, event_id))["status"] == "delivered"
    attempts = [attempt_json(a) for a in (await outbox.attempts_of(srv.db, [event_id]))[event_id]]
    assert [a["status"] for a in attempts] == [None, 200]
    assert "Timeout" in attempts[0]["error"] or "timeout" in attempts[0]["error"].lower()
    assert attempts[0]["latencyMs"] >= ATTEMPT_TIMEOUT * 1000 - 100 and attempts[1]["latencyMs"] >= 0


async def test_refused_connection_is_retried_until_the_schedule_is_spent(srv, receiver):
    closed = Receiver()
    url = closed.url
    await closed.stop()  # nothing listens there now
    await srv.quiet()  # deliveries happen only when this test flushes, after the URL has changed
    setup, _, event_id = await revoke(srv, receiver)
    await srv.db.transaction(lambda c: c.execute(text("UPDATE apps SET webhook_url = :u"), {"u": url}))
    for _ in range(len(SCHEDULE) + 1):
        await deliver(srv)
        srv.clock.advance(max(SCHEDULE) * 1.1 + 1)
    failed = await event(srv, event_id)
    assert failed["status"] == "failed" and failed["attempts"] == len(SCHEDULE) + 1
    attempts = [attempt_json(a) for a in (await outbox.attempts_of(srv.db, [event_id]))[event_id]]
    assert all(a["status"] is None and a["error"] for a in attempts)

    # Nothing is dropped: the failed event can be delivered again, with the same eventId.
    await srv.db.transaction(lambda c: c.execute(text("UPDATE apps SET webhook_url = :u"), {"u": receiver.url}))
    await outbox.redeliver(srv.db, srv.clock, event_id)
    await deliver(srv)
    assert receiver.received[-1].event_id == event_id
    assert (await event(srv, event_id))["status"] == "delivered"


async def test_a_test_delivery_touches_no_grant(srv, receiver, tmp_path, database_url):
    setup = await full_setup(srv, webhook_url=receiver.url)
    tokens = await tokens_for(srv, setup)
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}
    result = await arun_cli("apps", "test-webhook", setup.client_id, "--json", env=env)
    assert set(json.loads(result.stdout)) == {"eventId"}
    await deliver(srv)
    (request,) = receiver.received
    assert request.payload["reason"] == "test_delivery"
    assert request.payload["appScopedUserId"].startswith("asu_test_")
    assert request.payload["eventType"] == "authorization.revoked"
    grants = (await srv.client.get("/api/auth/authorizations", bearer=setup.token)).data["items"]
    assert [g["clientId"] for g in grants] == [setup.client_id]
    assert (await srv.client.get("/api/auth/me", bearer=tokens["accessToken"])).status == 200


async def test_webhooks_list_and_redeliver_on_the_command_line(srv, receiver, tmp_path, database_url):
    receiver.answer(Answer(400))
    setup, _, event_id = await revoke(srv, receiver)
    await deliver(srv)
    env = {"LBAUTH_DATABASE_URL": database_url, "LBAUTH_DATA_DIR": str(tmp_path / "data")}
    listed = json.loads((await arun_cli("webhooks", "list", "--app", setup.client_id, "--status", "failed",
                                        "--json", env=env)).stdout)
    assert [e["eventId"] for e in listed] == [event_id]
    assert set(listed[0]) == {"eventId", "appId", "clientId", "eventType", "reason", "status", "attempts",
                              "lastStatus", "nextAttemptAt", "createdAt"}
    assert listed[0]["lastStatus"] == 400 and listed[0]["attempts"] == 1
    assert (await arun_cli("webhooks", "redeliver", event_id, "--json", env=env)).returncode == 0
    await deliver(srv)
    assert [r.event_id for r in receiver.received] == [event_id, event_id]
    assert (await event(srv, event_id))["status"] == "delivered"


async def test_production_refuses_to_deliver_to_private_addresses(tmp_path, database_url, receiver):
    """A name that resolves to loopback after the URL was accepted: refused when connecting."""
    server = await start_server(tmp_path, database_url, env="production")
    try:
        await server.quiet()  # deliveries happen only when this test flushes, after the URL has changed
        setup, _, event_id = await revoke(server, receiver, webhook_url="https://hooks.example/lbauth")
        await server.db.transaction(lambda c: c.execute(text("UPDATE apps SET webhook_url = :u"),
                                                        {"u": f"http://localhost:{receiver.port}/hook"}))
        await deliver(server)
        assert receiver.received == []
        failed = await event(server, event_id)
        assert failed["status"] == "failed" and failed["lastStatus"] is None
    finally:
        server.client.close()
        await server.running.stop()


async def test_public_only_resolver_drops_non_public_addresses():
    resolver = PublicOnlyResolver()
    with pytest.raises(ForbiddenAddress):
        await resolver.resolve("localhost", 443)
    with pytest.raises(ForbiddenAddress):
        await resolver.resolve("10.1.2.3", 443)


def test_verify_signature_helper_for_receivers():
    body, secret, ts = b'{"eventId":"evt_1"}', "lba_whs_secret", "1900000000"
    signature = expected_signature(secret, ts, body)
    webhooks.verify_signature(secret, ts, body, signature, now=1_900_000_100)
    for args, reason in [((secret, ts, body + b" ", signature), "does not match"),
                         (("other", ts, body, signature), "does not match"),
                         ((secret, ts, body, signature.upper()[:-1]), "does not match"),
                         ((secret, "abc", body, signature), "Timestamp"),
                         ((secret, ts, body, ""), "missing")]:
        with pytest.raises(webhooks.InvalidSignature, match=reason):
            webhooks.verify_signature(*args, now=1_900_000_100)
    with pytest.raises(webhooks.InvalidSignature, match="300 seconds"):
        webhooks.verify_signature(secret, ts, body, signature, now=1_900_000_301)
    webhooks.verify_signature(secret, ts, body, signature, now=1_899_999_700)  # 300 s early still fine


async def test_a_large_answer_is_still_a_delivery(srv, receiver):
    receiver.answer(Answer(200, body=b"x" * (1024 * 1024)))  # the body is not read
    _, _, event_id = await revoke(srv, receiver)
    await deliver(srv)
    assert len(receiver.received) == 1 and (await event(srv, event_id))["status"] == "delivered"


async def test_an_app_without_a_webhook_url_gets_a_visible_failed_event(srv, receiver):
    setup = await full_setup(srv)  # no webhook URL
    await tokens_for(srv, setup)
    r = await srv.client.delete(f"/api/auth/authorizations/{setup.client_id}", bearer=setup.token)
    recorded = await event(srv, r.data["eventId"])
    assert recorded["status"] == "failed" and recorded["attempts"] == 0
    # Once the app has a URL, the event can be sent after all.
    await srv.db.transaction(lambda c: c.execute(text("UPDATE apps SET webhook_url = :u"), {"u": receiver.url}))
    await outbox.redeliver(srv.db, srv.clock, r.data["eventId"])
    await deliver(srv)
    assert receiver.received[0].payload["reason"] == "user_revoked"


def test_retry_after_is_capped_at_a_day():
    day = 24 * 60 * 60  # written out here, not read from the code under test
    assert outbox.retry_delay((10,), 1, 99_999_999) == day
    assert outbox.retry_delay((10,), 1, day + 1) == day
    assert outbox.retry_delay((10,), 1, day) == day
    assert outbox.retry_delay((10,), 1, 120) == 120
    assert outbox.retry_delay((10,), 2, None) is None  # the schedule is spent


@pytest.mark.parametrize("timestamp, signature", [("\u00b2", "ab"), ("1900000000", "\u00e9" * 64),
                                                  ("1900000000", "zz")])
def test_verify_signature_refuses_odd_input_without_crashing(timestamp, signature):
    with pytest.raises(webhooks.InvalidSignature):
        webhooks.verify_signature("secret", timestamp, b"{}", signature, now=1_900_000_000)

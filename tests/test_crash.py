"""Crashes (issue 8): one server process takes a concurrent stream that mixes code exchanges (some
codes sent twice at once), refreshes, user revocations, RFC 7009 revocations of refresh tokens, while
webhook deliveries are in flight to a slow receiver. It is SIGKILLed mid-stream, restarted, the stream
resumes, it is killed again, and restarted once more. Then:

- no code was redeemed twice: across every attempt each code gave tokens at most once, the database
  holds at most one refresh token per code, and re-presenting every code afterwards is refused, or,
  for a code never redeemed under a live grant, exactly one of two concurrent attempts succeeds;
- no grant is half-revoked: a revoked grant has every refresh token and unused code refused, its
  access tokens refused (`oauth2.token.revoked`) through its check-list row, and exactly one outbox
  event; a live grant has no event, and its tokens work unless a replayed code or an RFC 7009
  revocation revoked them;
- no event is lost: every revoked grant's event reaches the receiver and is recorded delivered, and
  each delivery a kill cut off is sent again after the restart;
- acknowledged work is durable: every exchange answered 200 left a refresh token that works unless
  something revoked it later, and every revocation answered 200 is committed.

Contract sections 5, 7 and 10. Only real processes and real HTTP; the database is read directly to
check the rows behind the answers.
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from sqlalchemy import select
from tornado.httpclient import HTTPClientError

from lbauth.clock import SystemClock
from lbauth.core.accounts import accounts
from lbauth.core.clients import outbox
from lbauth.core.crypto import opaque
from lbauth.core.oauth.authorization.codes import issue_code
from lbauth.core.oauth.authorization.endpoint import load_client
from lbauth.core.oauth.authorization.request import check_api_request
from lbauth.storage.db import Database, open_database
from lbauth.storage.models import authorization_codes, changes, grants, refresh_tokens, subjects, webhook_events
from tests.conftest import start_server
from tests.processes import ServerProcess
from tests.receiver import Answer, Receiver
from tests.support import unverified_claims

pytestmark = pytest.mark.slow

USERS, APPS, CODES = 2, 12, 6  # 24 grants, 6 codes each for the stream (plus one exchanged in set-up)
CONCURRENCY = 12
DELIVERY_DELAY = 1.5  # the receiver's answer takes this long: deliveries are under way when the kills come
UNANSWERED = (OSError, HTTPClientError)  # in flight when the process died: no answer
BASE_URL = "http://127.0.0.1:8000"  # one deployment: every process (each on its own port) has this issuer


@dataclass
class Case:
    """One grant (a user and an app) and what the stream did to it, as the client saw it."""
    index: int
    user_id: str
    session: str  # the user's token, for DELETE /api/auth/authorizations/{clientId}
    client_id: str
    client_secret: str
    redirect_uri: str
    codes: list[str]
    doubled: set[str]  # codes sent twice at once
    user_revokes: bool
    rfc_revokes: bool  # RFC 7009 revocation of the set-up refresh token
    grant_id: str = ""
    asu: str = ""
    app_id: str = ""
    setup_refresh: str = ""
    wins: collections.Counter = field(default_factory=collections.Counter)  # code -> 200 answers
    refresh_from: dict[str, str] = field(default_factory=dict)  # refresh token -> its code ("" for set-up)
    access_tokens: list[str] = field(default_factory=list)
    deleted: bool = False  # DELETE answered 200
    rfc_revoked: bool = False  # POST /oauth/revoke answered 200

    def credentials(self) -> dict[str, str]:
        return {"client_id": self.client_id, "client_secret": self.client_secret}


async def _exchange(server: ServerProcess, case: Case, code: str):
    return await server.client.post("/oauth/token", form={
        "grant_type": "authorization_code", "code": code, "redirect_uri": case.redirect_uri, **case.credentials()})


async def _refresh(server: ServerProcess, case: Case, refresh_token: str):
    return await server.client.post("/oauth/token", form={
        "grant_type": "refresh_token", "refresh_token": refresh_token, **case.credentials()})


def _refused(response) -> bool:
    return response.status == 400 and response.json["error"] == "invalid_grant"


def _record_tokens(case: Case, response, code: str | None) -> None:
    """A token response: 200 with tokens, or 400 invalid_grant; anything else fails the test."""
    if response.status == 200:
        body = response.json
        case.access_tokens.append(body["access_token"])
        if code is not None:
            case.wins[code] += 1
            case.refresh_from[body["refresh_token"]] = code
        return
    assert _refused(response), (response.status, response.text)


def stream_of(cases: list[Case], rng: random.Random) -> list[Callable[[ServerProcess], Awaitable[None]]]:
    """Every case's operations, shuffled together."""
    ops: list[Callable[[ServerProcess], Awaitable[None]]] = []
    for case in cases:
        for code in case.codes:
            async def exchange(server: ServerProcess, case: Case = case, code: str = code) -> None:
                times = 2 if code in case.doubled else 1
                answers = await asyncio.gather(*[_exchange(server, case, code) for _ in range(times)],
                                               return_exceptions=True)
                for answer in answers:
                    if not isinstance(answer, BaseException):
                        _record_tokens(case, answer, code)
                for answer in answers:
                    if isinstance(answer, BaseException):
                        raise answer
                for answer in answers:  # a refresh straight after, with what the exchange gave
                    if answer.status == 200:
                        _record_tokens(case, await _refresh(server, case, answer.json["refresh_token"]), None)
            ops.append(exchange)
        for _ in range(2):
            async def refresh(server: ServerProcess, case: Case = case) -> None:
                _record_tokens(case, await _refresh(server, case, case.setup_refresh), None)
            ops.append(refresh)
        if case.user_revokes:
            async def delete(server: ServerProcess, case: Case = case) -> None:
                r = await server.client.delete(f"/api/auth/authorizations/{case.client_id}", bearer=case.session)
                assert r.status == 200, r.text
                case.deleted = True
            ops.append(delete)
        if case.rfc_revokes:
            async def rfc7009(server: ServerProcess, case: Case = case) -> None:
                r = await server.client.post("/oauth/revoke", form={
                    "token": case.setup_refresh, "token_type_hint": "refresh_token", **case.credentials()})
                assert r.status == 200, r.text
                case.rfc_revoked = True
            ops.append(rfc7009)
    rng.shuffle(ops)
    return ops


def mid_air(receiver: Receiver) -> bool:
    """Is a delivery under way (arrived, not yet answered)?"""
    return any(time.monotonic() - r.at < DELIVERY_DELAY - 0.3 for r in receiver.received[-20:])


async def run_stream(server: ServerProcess, pending: collections.deque, kill_after: int | None,
                     receiver: Receiver, kills: list[float]) -> tuple[int, int, bool]:
    """Run operations from `pending` with CONCURRENCY workers; SIGKILL the server once `kill_after`
    of them were answered and a webhook delivery is under way, or 2 s after that if none is, or
    at once when only CONCURRENCY operations are left, so that the kill always lands mid-stream
    (None: run them all). Note the kill's time in `kills`. Returns (answered, unanswered, whether
    a delivery was under way at the kill)."""
    answered = unanswered = 0
    killed = deliveries_in_flight = False
    due: float | None = None

    async def worker() -> None:
        nonlocal answered, unanswered, killed, deliveries_in_flight, due
        while pending and not killed:
            op = pending.popleft()
            try:
                await op(server)
                answered += 1
            except UNANSWERED:
                assert killed, "a request failed while the server was up"
                unanswered += 1
            if kill_after is not None and answered >= kill_after and not killed:
                due = due or time.monotonic() + 2
                if mid_air(receiver) or time.monotonic() > due or len(pending) <= CONCURRENCY:
                    killed, deliveries_in_flight = True, mid_air(receiver)
                    server.kill()
                    kills.append(time.monotonic())

    await asyncio.gather(*[worker() for _ in range(CONCURRENCY)])
    return answered, unanswered, deliveries_in_flight


async def test_sigkill_twice_during_exchanges_refreshes_revocations_and_deliveries(tmp_path, database_url, receiver):
    receiver.default = Answer(200, delay=DELIVERY_DELAY)
    rng = random.Random(8)
    seed = await start_server(tmp_path, database_url, env="development", clock=SystemClock(), base_url=BASE_URL)
    cases: list[Case] = []
    for u in range(USERS):
        user = await seed.create_user()
        session = await accounts.sign_in(seed.db, seed.clock, 3600, user["email"], user["password"])
        for a in range(APPS):
            app = await seed.create_app(user["email"], name=f"App {u}-{a}", webhook_url=receiver.url)
            redirect_uri = app["redirectUris"][0]
            loaded = await load_client(seed.db, app["clientId"], redirect_uri)
            request = check_api_request(loaded, redirect_uri, ["userinfo"], None, None, None)
            codes = [await issue_code(seed.db, seed.clock, request, user["userId"], 300)
                     for _ in range(CODES + 1)]
            index = len(cases)
            case = Case(index, user["userId"], session.token, app["clientId"], app["clientSecret"], redirect_uri,
                        codes[1:], doubled=set(codes[1:3]) if index % 2 == 0 else set(),
                        user_revokes=index % 3 != 2, rfc_revokes=index % 4 == 1, app_id=app["appId"])
            r = await _exchange(seed, case, codes[0])
            assert r.status == 200, r.text
            case.setup_refresh = r.json["refresh_token"]
            case.refresh_from[case.setup_refresh] = ""
            case.access_tokens.append(r.json["access_token"])
            cases.append(case)
    seed.client.close()
    await seed.running.stop()

    db = open_database(database_url)
    try:
        for case in cases:
            case.grant_id, case.asu = (await db.read(lambda c, case=case: c.execute(
                select(grants.c.id, subjects.c.asu)
                .join(subjects, (subjects.c.app_id == grants.c.app_id) & (subjects.c.user_id == grants.c.user_id))
                .where(grants.c.app_id == case.app_id, grants.c.user_id == case.user_id)).one()))

        started = time.monotonic()
        ops = stream_of(cases, rng)
        pending = collections.deque(ops)
        settings = {"webhook_timeout": "2", "base_url": BASE_URL}

        # Kill 1, about a third of the way in; kill 2, about half way through what is left; then the
        # rest. The shares are of what is left, since a kill may wait 2 s for a delivery.
        in_flight, kills = [], []
        for share in (0.3, 0.5):
            server = await ServerProcess(database_url, tmp_path / "data", **settings).start()
            before = len(pending)
            try:
                answered, unanswered, deliveries = await run_stream(server, pending, int(len(pending) * share),
                                                                 receiver, kills)
            finally:
                server.kill()
                server.stop()  # closes its client
            assert answered >= 10 and unanswered >= 1 and pending, \
                (answered, unanswered, len(pending))  # the kill did land mid-stream, with requests in flight
            assert answered + unanswered + len(pending) == before
            in_flight.append(deliveries)
        assert any(in_flight), "no kill came with a webhook delivery under way"
        server = await ServerProcess(database_url, tmp_path / "data", **settings).start()
        try:
            answered, unanswered, _ = await run_stream(server, pending, None, receiver, kills)
            assert unanswered == 0 and not pending
            await check_state(server, db, cases, receiver, kills)
        finally:
            server.stop()
        twice = sum(1 for n in collections.Counter(r.event_id for r in receiver.received).values() if n > 1)
        print(f"crash test: {len(ops)} operations, {len(receiver.received)} deliveries ({twice} events again after"
              f" a kill), {time.monotonic() - started:.1f} s after set-up")
    finally:
        await db.close()


async def check_state(server: ServerProcess, db: Database, cases: list[Case], receiver: Receiver,
                      kills: list[float]) -> None:
    def snapshot(conn):
        return {
            "grants": {r.id: r for r in conn.execute(select(grants))},
            "codes": {r.code_hash: r for r in conn.execute(select(authorization_codes))},
            "refresh": {r.token_hash: r for r in conn.execute(select(refresh_tokens))},
            "revocations": list(conn.execute(select(changes).where(changes.c.grant_id.is_not(None)))),
            "events": list(conn.execute(select(webhook_events))),
        }
    rows = await db.read(snapshot)
    revoked = {case.grant_id for case in cases if rows["grants"][case.grant_id].revoked_at is not None}
    assert revoked and len(revoked) < len(cases)

    # ---- no code redeemed twice -----------------------------------------------------------------
    for case in cases:
        assert max(case.wins.values(), default=0) <= 1, case.wins
    per_code = collections.Counter(r.code_hash for r in rows["refresh"].values() if r.code_hash is not None)
    assert max(per_code.values()) == 1, "a code gave two refresh tokens"
    for case in cases:
        for code in case.wins:
            code_row = rows["codes"][opaque.digest(code)]
            assert code_row.used_at is not None and per_code[code_row.code_hash] == 1

    # ---- acknowledged work is durable -----------------------------------------------------------
    for case in cases:
        grant = rows["grants"][case.grant_id]
        if case.deleted:
            assert grant.revoked_at is not None, "a revocation answered 200 was lost"
        if case.rfc_revoked:
            assert rows["refresh"][opaque.digest(case.setup_refresh)].revoked_at is not None
        for token in case.refresh_from:
            assert opaque.digest(token) in rows["refresh"], "an exchange answered 200 left no refresh token"

    # ---- no half-revoked grant: the rows --------------------------------------------------------
    events = collections.Counter((e.app_id, e.asu) for e in rows["events"] if e.reason == outbox.USER_REVOKED)
    for case in cases:
        grant = rows["grants"][case.grant_id]
        key = (case.app_id, case.asu)
        if grant.revoked_at is None:
            assert events[key] == 0, "an event for a live grant"
            continue
        assert events[key] == 1, f"{events[key]} events for a revoked grant"
        for token in rows["refresh"].values():
            if token.grant_id == grant.id:
                assert token.revoked_at is not None, ("a live refresh token under a revoked grant",
                                                      token.created_at, grant.revoked_at)
        for code in rows["codes"].values():
            if code.grant_id == grant.id:
                assert code.used_at is not None or code.revoked_at is not None, "an open code under a revoked grant"
        assert any(r.grant_id == grant.id and r.changed_at >= grant.revoked_at for r in rows["revocations"]), \
            "a revoked grant is not on the check-list"

    # ---- no half-revoked grant, and durability: what clients get --------------------------------
    async def check_refresh(case: Case, token: str) -> None:
        row = rows["refresh"][opaque.digest(token)]
        r = await _refresh(server, case, token)
        if case.grant_id in revoked or row.revoked_at is not None:
            assert _refused(r), (r.status, r.text)
            return
        assert r.status == 200, r.text
    await asyncio.gather(*[check_refresh(case, token) for case in cases for token in case.refresh_from])
    for case in cases:
        if case.grant_id in revoked or case.doubled:
            continue  # a code presented twice revokes what its first redemption issued
        for token, code in case.refresh_from.items():
            if code or not case.rfc_revokes:
                assert rows["refresh"][opaque.digest(token)].revoked_at is None, "nothing revoked this token"

    async def check_access(case: Case, token: str) -> None:
        me = await server.client.get("/api/auth/me", bearer=token)
        if case.grant_id in revoked:
            entries = sorted(r.changed_at for r in rows["revocations"] if r.grant_id == case.grant_id)
            issued_at = unverified_claims(token)["iat"]
            assert me.status == 401, ("an access token of a revoked grant works", issued_at, entries)
            me.assert_error(401, "oauth2.token.revoked")
        elif not any(r.grant_id == case.grant_id for r in rows["revocations"]):
            assert me.status == 200, me.text
    await asyncio.gather(*[check_access(case, token) for case in cases for token in case.access_tokens])

    # ---- no event lost: each reaches the receiver, and the outbox records it delivered --------------
    expected = {(case.app_id, case.asu) for case in cases if case.grant_id in revoked}
    deadline = time.monotonic() + 30  # a delivery cut off by a kill waits for its lease (2 x 2 s + 5 s)
    while True:
        got = {(r.payload["appId"], r.payload["appScopedUserId"]) for r in receiver.received
               if r.payload["reason"] == outbox.USER_REVOKED}
        statuses = await db.read(lambda c: collections.Counter(c.execute(
            select(webhook_events.c.status).where(webhook_events.c.reason == outbox.USER_REVOKED)).scalars()))
        if expected <= got and set(statuses) == {"delivered"}:
            break
        assert time.monotonic() < deadline, (f"{len(expected - got)} revoked grants' events never arrived", statuses)
        await asyncio.sleep(0.2)
    assert got == expected  # and none for a live grant
    # A delivery the receiver had when a kill came was not recorded: it was sent again after the restart.
    cut_off = [r for r in receiver.received for kill in kills if kill - DELIVERY_DELAY < r.at < kill]
    assert cut_off
    for r in cut_off:
        assert any(again.event_id == r.event_id and again.at > r.at for again in receiver.received)

    # ---- every code, presented again: refused, or redeemed exactly once -------------------------
    async def present_again(case: Case, code: str) -> None:
        row = rows["codes"][opaque.digest(code)]
        if case.wins[code]:
            assert _refused(await _exchange(server, case, code))
            return
        answers = await asyncio.gather(_exchange(server, case, code), _exchange(server, case, code))
        successes = [a for a in answers if a.status == 200]
        assert all(a.status == 200 or _refused(a) for a in answers), [a.text for a in answers]
        open_code = row.used_at is None and row.revoked_at is None and case.grant_id not in revoked
        assert len(successes) == (1 if open_code else 0), (len(successes), row, case.grant_id in revoked)
    await asyncio.gather(*[present_again(case, code) for case in cases for code in case.codes])
    per_code = collections.Counter(await db.read(lambda c: list(c.execute(
        select(refresh_tokens.c.code_hash).where(refresh_tokens.c.code_hash.is_not(None))).scalars())))
    assert max(per_code.values()) == 1, "a code gave two refresh tokens"

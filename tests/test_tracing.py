"""OpenTelemetry tracing (LBAUTH_OTEL=on): a SERVER span per request named by its route, database
spans on both databases, CLIENT spans for webhooks (which continue the trace of the change that
queued them, in whichever process delivers them, and send `traceparent`), and no secret in any span.

In-process tests export to the SDK's InMemorySpanExporter; the real `lbauth serve` tests export
over OTLP/HTTP to a receiver in this test, which decodes them with opentelemetry-proto.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from lbauth import tracing
from lbauth.clock import SystemClock
from lbauth.storage.db import plans
from tests.conftest import IN_CI, ROOT, running_server
from tests.flow_helpers import (
    PageSession,
    full_setup,
    oauth_url,
    pkce_pair,
    redirect_query,
    tokens_for,
)
from tests.processes import ServerProcess
from tests.receiver import Answer
from tests.support import basic_auth, wait_until

try:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind
except ImportError:  # the otel extra is not installed
    ExportTraceServiceRequest = InMemorySpanExporter = SpanKind = None  # type: ignore[assignment,misc]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def require_otel() -> None:
    """The otel extra (opentelemetry-sdk, its OTLP exporter, opentelemetry-proto), or skip (fail
    under CI=true, where `make test` installed it)."""
    if InMemorySpanExporter is None or ExportTraceServiceRequest is None:
        reason = "OpenTelemetry is not installed: pip install -e '.[test]' (it pulls lbauth[otel])"
        if IN_CI:
            pytest.fail(f"CI=true: {reason}", pytrace=False)
        pytest.skip(reason)


@pytest.fixture
def exported() -> Any:
    """Tracing on in this process, exporting each span as it ends to an in-memory exporter."""
    require_otel()
    exporter = InMemorySpanExporter()
    tracing.start(exporter=exporter)
    try:
        yield exporter
    finally:
        tracing.stop()


def spans_of(exporter: Any, trace_id: str | None = None) -> list:
    spans = list(exporter.get_finished_spans())
    if trace_id is not None:
        spans = [s for s in spans if f"{s.context.trace_id:032x}" == trace_id]
    return spans


def server_spans(spans: list) -> list:
    return [s for s in spans if s.kind == SpanKind.SERVER]


def db_spans(spans: list) -> list:
    return [s for s in spans if s.kind == SpanKind.CLIENT and "db.system.name" in (s.attributes or {})]


# ---- in-process: names, parents, attributes --------------------------------------------------------------

async def test_a_request_is_one_server_span_named_by_its_route_continuing_traceparent(
        tmp_path, database_url, backend, exported):
    async with running_server(tmp_path, database_url) as server:
        setup = await full_setup(server)
        await tokens_for(server, setup)
        r = await server.client.delete(f"/api/auth/authorizations/{setup.client_id}?x=secret-in-query",
                                       bearer=setup.token, headers={"traceparent": TRACEPARENT})
        assert r.status == 200
        spans = spans_of(exported, TRACE_ID)
        (span,) = server_spans(spans)
        assert span.name == "DELETE /api/auth/authorizations/{id}"  # the route, never the client id in the path
        assert span.parent is not None and f"{span.parent.span_id:016x}" == PARENT_ID and span.parent.is_remote
        assert span.attributes["http.route"] == "/api/auth/authorizations/{id}"
        assert span.attributes["http.request.method"] == "DELETE"
        assert span.attributes["http.response.status_code"] == 200
        assert span.attributes["url.path"] == f"/api/auth/authorizations/{setup.client_id}"  # no query string
        assert span.attributes["lbauth.request_id"] == r.headers["X-Request-Id"]
        # Its statements, on this database, as children of the request's span.
        statements = db_spans(spans)
        assert statements, [s.name for s in spans]
        assert {s.attributes["db.system.name"] for s in statements} == {backend}
        assert all(s.parent.span_id == span.context.span_id for s in statements)
        assert any(s.name == "UPDATE grants" for s in statements), [s.name for s in statements]
        assert all("?" in s.attributes["db.query.text"] or "$1" in s.attributes["db.query.text"]
                   or "WHERE" not in s.attributes["db.query.text"] for s in statements)

        # Without traceparent: a trace of its own. An unknown path: named by its method only.
        exported.clear()
        assert (await server.client.get("/no/such/lba_rt_x1?token=abc")).status == 404
        (missing,) = server_spans(spans_of(exported))
        assert missing.name == "GET" and missing.parent is None
        assert missing.attributes["url.path"] == "/no/such/lba_rt_[redacted]" and "http.route" not in missing.attributes
        exported.clear()
        assert (await server.client.get("/oauth/?client_id=x")).status == 400
        assert [s.name for s in server_spans(spans_of(exported))] == ["GET /oauth/"]


async def test_periodic_jobs_make_no_database_spans_of_their_own(tmp_path, database_url, exported):
    async with running_server(tmp_path, database_url) as server:
        await server.services.poll_revocations()  # statements outside any request
        await server.running.deliverer.flush()
        assert db_spans(spans_of(exported)) == []
        assert plans.statement_span is not None
    assert server.running.http_server.request_callback.__class__.__name__ == "TracedRequests"


async def test_tracing_off_leaves_no_hook(tmp_path, database_url):
    require_otel()
    from sqlalchemy import event
    from sqlalchemy.engine import Engine
    stopped = tracing.start(exporter=InMemorySpanExporter())
    assert event.contains(Engine, "before_cursor_execute", stopped._before_cursor_execute)
    tracing.stop()
    for name in ("before_cursor_execute", "after_cursor_execute", "handle_error"):
        assert not event.contains(Engine, name, getattr(stopped, "_" + name))
    assert tracing.active is None and plans.statement_span is None
    async with running_server(tmp_path, database_url) as server:
        assert type(server.running.http_server.request_callback).__name__ == "BodyDeadline"
        assert tracing.traceparent() is None


async def test_a_webhook_carries_the_trace_of_the_change_that_queued_it(
        tmp_path, database_url, receiver, exported):
    async with running_server(tmp_path, database_url, env="development", webhook_timeout=2,
                              clock=SystemClock()) as server:
        await server.quiet()  # this test flushes the deliverer itself
        setup = await full_setup(server, webhook_url=receiver.url)
        await tokens_for(server, setup)
        r = await server.client.delete(f"/api/auth/authorizations/{setup.client_id}", bearer=setup.token,
                                       headers={"traceparent": TRACEPARENT})
        assert r.status == 200
        (revocation,) = server_spans(spans_of(exported, TRACE_ID))
        rows = await _traceparents(server)
        assert rows == [f"00-{TRACE_ID}-{revocation.context.span_id:016x}-01"]
        await server.running.deliverer.flush()
        (received,) = receiver.received
        sent = received.headers["Traceparent"]
        assert re.fullmatch(rf"00-{TRACE_ID}-[0-9a-f]{{16}}-01", sent)
        (post,) = [s for s in spans_of(exported, TRACE_ID) if s.name == "POST webhook"]
        assert post.kind == SpanKind.CLIENT and post.parent.span_id == revocation.context.span_id
        assert sent.split("-")[2] == f"{post.context.span_id:016x}"
        assert post.attributes["http.response.status_code"] == 200
        assert post.attributes["server.address"] == "127.0.0.1" and "url.full" not in post.attributes


async def _traceparents(server) -> list[str | None]:
    from sqlalchemy import select

    from lbauth.storage.models import webhook_events
    return await server.db.read(lambda c: list(c.execute(select(webhook_events.c.traceparent)).scalars()))


# ---- no secret in any span ------------------------------------------------------------------------------

async def test_no_secret_of_a_full_flow_is_in_any_span(tmp_path, database_url, exported):
    """Sign in (page), authorize with state and PKCE, exchange the code, refresh, UserInfo, revoke:
    none of the secrets used is anywhere in any exported span (names, attributes, events, links,
    resource), all serialized and searched."""
    async with running_server(tmp_path, database_url) as server:
        setup = await full_setup(server)
        verifier, challenge = pkce_pair()
        state = "st-" + secrets.token_urlsafe(16)
        nonce = "n-" + secrets.token_urlsafe(16)
        browser = PageSession(server)
        consent = await browser.open_logged_in(
            oauth_url({"client_id": setup.client_id, "redirect_uri": setup.redirect_uri, "response_type": "code",
                       "scope": "openid profile email userinfo", "state": state, "nonce": nonce,
                       "code_challenge": challenge, "code_challenge_method": "S256"}),
            setup.user["email"], setup.user["password"])
        landing = await browser.decide(consent, "approve")
        query = redirect_query(landing.location, setup.redirect_uri)
        assert query["state"] == [state]
        code = query["code"][0]
        auth = {"Authorization": basic_auth(setup.client_id, setup.client_secret)}
        r = await server.client.post("/oauth/token", headers=auth, form={
            "grant_type": "authorization_code", "code": code, "redirect_uri": setup.redirect_uri,
            "code_verifier": verifier})
        assert r.status == 200, r.text
        tokens = r.json
        r = await server.client.post("/oauth/token", headers=auth, form={
            "grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]})
        assert r.status == 200, r.text
        refreshed = r.json
        assert (await server.client.get("/oauth/userinfo", bearer=refreshed["access_token"])).status == 200
        r = await server.client.post("/oauth/revoke", form={
            "token": refreshed["refresh_token"], "client_id": setup.client_id, "client_secret": setup.client_secret})
        assert r.status == 200
        # The envelope API too: the password and the user token, a code and its exchange.
        r = await server.client.post("/api/auth/login", json={"email": setup.user["email"],
                                                               "password": setup.user["password"]})
        user_token = r.data["token"]
        assert (await server.client.get("/api/auth/me", bearer=tokens["access_token"])).status in (200, 401)

        secrets_used = {
            "password": setup.user["password"], "client secret": setup.client_secret, "code": code,
            "access token": tokens["access_token"], "refresh token": tokens["refresh_token"],
            "id token": tokens["id_token"], "refreshed access token": refreshed["access_token"],
            "refreshed refresh token": refreshed["refresh_token"], "state": state, "nonce": nonce,
            "code_verifier": verifier, "code_challenge": challenge, "user token": user_token,
            "setup user token": setup.token,
        }
        for name, value in list(secrets_used.items()):
            if value.startswith("lba_"):  # a prefixed credential: its random part alone must not show
                secrets_used[name + " (random part)"] = value.split("_", 2)[2][:24]
        spans = spans_of(exported)
        assert len(server_spans(spans)) >= 8 and db_spans(spans)
        dumped = "\n".join(span.to_json() for span in spans)
        leaks = [name for name, value in secrets_used.items() if value in dumped]
        assert not leaks, f"spans hold the {', '.join(leaks)}"
        assert "?" not in "".join(s.attributes.get("url.path", "") for s in server_spans(spans))


# ---- a real `lbauth serve`: OTLP/HTTP to a receiver here ---------------------------------------------------

class OtlpReceiver:
    """An OTLP/HTTP trace receiver on a loopback port, in a thread of its own (a test waiting on a
    server's exit must not keep the server's last export waiting): every span of every POST
    /v1/traces, decoded with opentelemetry-proto, with its resource's attributes."""

    def __init__(self) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        received = self.spans = []  # (resource attributes, span)
        self.bodies = 0

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    for resource_spans in request.resource_spans:
                        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                        for scope_spans in resource_spans.scope_spans:
                            received.extend((resource, span) for span in scope_spans.spans)
                    owner.bodies += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        owner = self
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def of_trace(self, trace_id: str) -> list[tuple[dict, Any]]:
        return [(resource, span) for resource, span in self.spans if span.trace_id.hex() == trace_id]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


def _attributes(span: Any) -> dict:
    return {a.key: _value(a.value) for a in span.attributes}


@pytest.fixture
def otlp() -> Any:
    require_otel()
    receiver = OtlpReceiver()
    yield receiver
    receiver.stop()


def traced_process(database_url: str, data_dir: Path, otlp: OtlpReceiver, instance: str,
                   **settings: str) -> ServerProcess:
    process = ServerProcess(database_url, data_dir, otel="on", **settings)
    process.env.update(OTEL_EXPORTER_OTLP_ENDPOINT=otlp.endpoint, OTEL_BSP_SCHEDULE_DELAY="100",
                       OTEL_SERVICE_NAME="lbauth-test", OTEL_RESOURCE_ATTRIBUTES=f"service.instance.id={instance}")
    return process


@pytest.mark.slow
async def test_one_trace_from_a_request_through_the_database_to_a_webhook_another_process_delivers(
        tmp_path, database_url, backend, receiver, otlp):
    """The change is made through one `lbauth serve` (its webhook attempts answered 503), which then
    stops; another, with two workers, delivers the retry. One trace: the incoming traceparent's."""
    seed_server = running_server(tmp_path, database_url, env="development", clock=SystemClock())
    async with seed_server as seed:
        setup = await full_setup(seed, webhook_url=receiver.url)
        await tokens_for(seed, setup)
    receiver.default = Answer(503)  # the first process's attempts fail: the event waits for a retry
    schedule = ",".join(["1"] * 20)
    first = await traced_process(database_url, tmp_path / "data", otlp, "first",
                                 webhook_retry_schedule=schedule).start()
    try:
        r = await first.client.delete(f"/api/auth/authorizations/{setup.client_id}", bearer=setup.token,
                                      headers={"traceparent": TRACEPARENT})
        assert r.status == 200, r.text
        await wait_until(lambda: len(receiver.received) >= 1, 15, "the first process's attempt")
    finally:
        await asyncio.to_thread(first.stop)  # SIGTERM: it exports what it holds
    attempts_before = len(receiver.received)
    receiver.default = Answer(200)
    second = await traced_process(database_url, tmp_path / "data", otlp, "second", workers="2",
                                  webhook_retry_schedule=schedule).start()
    try:
        await wait_until(lambda: len(receiver.received) > attempts_before, 20, "the second process's delivery")
    finally:
        await asyncio.to_thread(second.stop)

    # The receiver got the incoming trace id at every attempt.
    for attempt in receiver.received:
        assert attempt.headers["Traceparent"].split("-")[1] == TRACE_ID, attempt.headers
    delivered = receiver.received[-1].headers["Traceparent"]

    await wait_until(lambda: any(span.name == "POST webhook" and resource["service.instance.id"] == "second"
                                 for resource, span in otlp.of_trace(TRACE_ID)), 10, "the second process's spans")
    spans = otlp.of_trace(TRACE_ID)
    by_first = [span for resource, span in spans if resource["service.instance.id"] == "first"]
    by_second = [span for resource, span in spans if resource["service.instance.id"] == "second"]
    assert all(resource["service.name"] == "lbauth-test" for resource, _ in spans)
    (request,) = [s for s in by_first if s.name == "DELETE /api/auth/authorizations/{id}"]
    assert request.kind == request.SPAN_KIND_SERVER and request.parent_span_id.hex() == PARENT_ID
    assert _attributes(request)["http.response.status_code"] == 200
    statements = [s for s in by_first if "db.system.name" in _attributes(s)]
    assert statements and all(s.parent_span_id == request.span_id for s in statements)
    assert {_attributes(s)["db.system.name"] for s in statements} == {backend}
    assert any(s.name == "INSERT webhook_events" for s in statements), [s.name for s in statements]
    first_posts = [s for s in by_first if s.name == "POST webhook"]
    assert first_posts and all(_attributes(s)["http.response.status_code"] == 503 for s in first_posts)
    (post,) = [s for s in by_second if s.name == "POST webhook"]
    assert post.kind == post.SPAN_KIND_CLIENT and post.parent_span_id == request.span_id
    assert _attributes(post)["http.response.status_code"] == 200
    assert delivered == f"00-{TRACE_ID}-{post.span_id.hex()}-01"


@pytest.mark.slow
async def test_a_stopping_server_waits_for_a_silent_collector_only_a_few_seconds(tmp_path, database_url):
    """The collector takes connections and never answers. SIGTERM: the server waits for it a few
    seconds (STOP_SECONDS), says that it stops without the last spans, and exits cleanly. Unbounded,
    it waited out the exporter's 10 s timeout (and the SDK allows 30 s a processor)."""
    require_otel()
    from lbauth.otel import STOP_SECONDS
    silent = socket.create_server(("127.0.0.1", 0), backlog=16)  # never accepts: the kernel takes the connections
    process = ServerProcess(database_url, tmp_path / "data", otel="on")
    process.env.update(OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{silent.getsockname()[1]}")
    try:
        await process.start()
        assert (await process.client.get("/healthz")).status == 200  # a span to export
        started = time.monotonic()
        os.killpg(process.proc.pid, signal.SIGTERM)
        status = await asyncio.to_thread(process.proc.wait, 25)
        waited = time.monotonic() - started
        assert status == 0, process.log.read_text()[-2000:]
        assert waited < STOP_SECONDS + 4, waited  # a hang guard: 10 s and more without the bound
        assert "did not take the last spans" in process.log.read_text()
    finally:
        process.stop()
        silent.close()


# ---- starting with and without tracing ------------------------------------------------------------------

def _serve_through(code: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """`lbauth serve`'s own main, in a fresh interpreter that first runs `code`."""
    wrapper = f"{code}\nimport sys\nfrom lbauth.cli import main\nsys.exit(main(['serve']))"
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("LBAUTH_", "OTEL_"))}
    full_env.update(env)
    return subprocess.run([sys.executable, "-c", wrapper], cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def test_lbauth_otel_on_without_opentelemetry_refuses_to_start_naming_the_package(tmp_path):
    result = _serve_through("import sys; sys.modules['opentelemetry'] = None  # as if not installed",
                            {"LBAUTH_OTEL": "on", "LBAUTH_ENV": "development", "LBAUTH_DATA_DIR": str(tmp_path),
                             "LBAUTH_PORT": "0"})
    assert result.returncode == 2, result
    assert result.stderr == ("lbauth: LBAUTH_OTEL=on needs the opentelemetry-sdk package: "
                             "pip install 'lbauth[otel]'\n")
    assert not (tmp_path / "lbauth.db").exists()  # refused before anything started


def test_an_exporter_lbauth_does_not_ship_is_refused_at_start(tmp_path):
    require_otel()
    env = {"LBAUTH_OTEL": "on", "LBAUTH_ENV": "development", "LBAUTH_DATA_DIR": str(tmp_path), "LBAUTH_PORT": "0"}
    result = _serve_through("", {**env, "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result
    assert "OTEL_EXPORTER_OTLP_PROTOCOL: lbauth sends OTLP over HTTP, http/protobuf (got 'grpc')" in result.stderr
    result = _serve_through("", {**env, "OTEL_TRACES_EXPORTER": "zipkin"})
    assert result.returncode == 2 and "OTEL_TRACES_EXPORTER" in result.stderr, result


@pytest.mark.slow
async def test_a_server_without_lbauth_otel_never_imports_opentelemetry(tmp_path, database_url):
    """A real `lbauth serve` that answers requests, then stops: at its exit no opentelemetry module
    was ever imported (its spans' machinery costs nothing when off)."""
    seen = tmp_path / "modules.txt"
    server = ServerProcess(database_url, tmp_path / "data")
    server.argv = [sys.executable, "-c", (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(seen)!r}, 'w').write(' '.join(sorted(m for m in sys.modules "
        "if m.split('.')[0] == 'opentelemetry' or m == 'lbauth.otel'))))\n"
        "from lbauth.cli import main\nsys.exit(main(['serve']))")]
    await server.start()
    try:
        assert (await server.client.get("/.well-known/openid-configuration")).status == 200
        assert (await server.client.post("/oauth/token", form={"grant_type": "refresh_token"})).status == 401
    finally:
        await asyncio.to_thread(server.stop)
    assert server.proc is not None and server.proc.returncode == 0
    assert seen.read_text() == ""


# ---- pieces --------------------------------------------------------------------------------------------

def test_route_templates():
    require_otel()
    from lbauth.otel import describe_statement, route_template
    assert route_template("/account/sessions/([^/]+)/end") == "/account/sessions/{id}/end"
    assert route_template(r"/.well-known/openid-configuration/(.+)") == "/.well-known/openid-configuration/{path}"
    assert route_template(r"/(.+)/\.well-known/openid-configuration") == "/{path}/.well-known/openid-configuration"
    assert route_template("/oauth/?") == "/oauth/" and route_template("/account/?") == "/account/"
    assert route_template("/static/(.*)") == "/static/{path}"
    assert route_template("unmatched") == ""
    assert describe_statement("sqlite", "DELETE FROM changes WHERE changes.at < ?")[0] == "DELETE changes"
    assert describe_statement("postgresql", "SELECT 1")[0] == "SELECT"


def test_tracing_settings():
    from lbauth import settings
    assert settings.load({}, environ={}).otel is False
    assert settings.load({}, environ={"LBAUTH_OTEL": "on"}).otel is True
    with pytest.raises(settings.SettingsError, match="LBAUTH_OTEL: must be on or off"):
        settings.load({}, environ={"LBAUTH_OTEL": "maybe"})
    assert tracing.exporters({}) == ["otlp"]
    assert tracing.exporters({"OTEL_TRACES_EXPORTER": "none"}) == ["none"]
    assert tracing.exporters({"OTEL_TRACES_EXPORTER": "otlp,console",
                              "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}) == ["otlp", "console"]
    with pytest.raises(tracing.TracingUnavailable, match="got 'http/json'"):
        tracing.exporters({"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})


# ---- mail and metadata documents ---------------------------------------------------------------------------

async def test_mail_is_sent_in_a_client_span_that_names_neither_recipient_nor_link(
        tmp_path, database_url, mailbox, exported):
    from tests.mailbox import link_in
    async with running_server(tmp_path, database_url, smtp_url=mailbox.url, signup="open") as server:
        email = f"person-{secrets.token_hex(4)}@example.com"
        r = await server.client.post("/api/auth/signup", json={"name": "Ada", "email": email,
                                                               "password": "a long walk on the beach 42"})
        assert r.status == 202
        link = link_in(await mailbox.next(to=email), "lba_su_")
        await wait_until(lambda: any(s.name == "SMTP send" for s in spans_of(exported)), 5, "the SMTP span's end")
        (send,) = [s for s in spans_of(exported) if s.name == "SMTP send"]
        assert send.kind == SpanKind.CLIENT and send.parent is None  # the mailer's, apart from the request
        assert send.attributes["server.address"] == "127.0.0.1" and send.attributes["lbauth.mail.outcome"] == "sent"
        assert send.attributes["lbauth.mail.kind"] and send.attributes["server.port"] == mailbox.port
        dumped = "\n".join(span.to_json() for span in spans_of(exported))
        assert email not in dumped and parse_qs(urlsplit(link).query)["token"][0] not in dumped


async def test_a_metadata_document_is_fetched_in_a_client_span_of_the_request(tmp_path, database_url, exported):
    from tests.test_client_metadata_documents import Site, document, request_url
    site = Site(tmp_path)
    try:
        async with running_server(tmp_path, database_url, env="development",
                                  outbound_ca_file=str(site.ca)) as server:
            client_id = site.publish("agents/smith.json", document())
            page = await PageSession(server).get(request_url(client_id))
            assert page.status == 200
            (request,) = [s for s in server_spans(spans_of(exported)) if s.name == "GET /oauth/"]
            (fetch,) = [s for s in spans_of(exported) if s.name == "GET client metadata document"]
            assert fetch.kind == SpanKind.CLIENT and fetch.parent.span_id == request.context.span_id
            assert fetch.attributes["url.full"] == client_id and fetch.attributes["http.response.status_code"] == 200
    finally:
        site.stop()


def test_log_lines_name_their_trace(exported):
    import io
    import logging

    from lbauth import logs
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    logger = logging.getLogger("lbauth.test_tracing")
    logger.addHandler(handler)
    try:
        with tracing.active.tracer.start_as_current_span("work") as span:
            logger.warning("inside")
        logger.warning("outside")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["traceId"] == f"{span.get_span_context().trace_id:032x}"
    assert inside["spanId"] == f"{span.get_span_context().span_id:016x}"
    assert "traceId" not in outside

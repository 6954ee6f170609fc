"""OpenTelemetry tracing when LBAUTH_OTEL=on (docs/operations.md, "Tracing"): the SDK's tracer
provider, and the spans lbauth makes itself.

- A SERVER span per request (lbauth/server.py starts it when the request's headers arrive, continuing
  an incoming W3C `traceparent`; lbauth/app.py ends it), named by the route that answered:
  `POST /oauth/token`, `GET /account/sessions/{id}/end`, never by the path.
- A CLIENT span per SQL statement of a traced request, on both databases: the statements compiled
  plans send straight to the driver (storage/db/plans.py's hook) and those SQLAlchemy runs (its
  cursor events). Named `SELECT users`; the statement's text has placeholders, never values.
- CLIENT spans for webhook deliveries (which continue the trace of the change that queued them and
  send `traceparent` to the receiver), mail (SMTP) and client metadata-document fetches.

What a span never holds: a query string, a header, a body, a bound value, an error's message (a
driver's names the values it was given), an email or IP address. Attributes are chosen here, from
the route, the method, the status, the path, the SQL text and the host an outbound call goes to.

Imported only when tracing starts (lbauth.tracing); nothing here imports Tornado.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from sqlalchemy import event
from sqlalchemy.engine import Engine

from lbauth import __version__, logs, tracing
from lbauth.logs import redact
from lbauth.storage.db import plans
from lbauth.storage.db.unit import counts_statements

_W3C = TraceContextTextMapPropagator()
_SERVER_SPAN = "lbauth_server_span"  # on a Tornado HTTP connection: the span of its request under way
_STATEMENT_SPAN = "_lbauth_span"  # on a SQLAlchemy execution context: its statement's span
_TABLE = re.compile(r'\b(?:FROM|INTO|UPDATE|JOIN)\s+"?([A-Za-z_][A-Za-z0-9_]*)', re.IGNORECASE)
_DESCRIBED_MAX = 2_000  # statements' names and attributes remembered


log = logging.getLogger("lbauth.otel")
STOP_SECONDS = 5.0  # how long a stopping process waits for the collector to take the spans it holds


class Tracing:
    """Tracing in this process: `start` it once the process serves, `stop` it to export the rest."""

    def __init__(self, provider: TracerProvider) -> None:
        self.provider = provider
        self.tracer = provider.get_tracer("lbauth", __version__)
        self._described: dict[tuple[str, str], tuple[str, dict[str, str]]] = {}
        self._routes: dict[tuple[str, str], tuple[str, str]] = {}

    @classmethod
    def start(cls, *, exporter: SpanExporter | None, environ: Mapping[str, str]) -> Tracing:
        """The provider reads the standard variables (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
        OTEL_TRACES_SAMPLER[_ARG], OTEL_BSP_*, OTEL_EXPORTER_OTLP_*); the service is `lbauth`
        unless they name it."""
        resource = Resource.create({})
        if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
            resource = resource.merge(Resource({SERVICE_NAME: "lbauth"}))
        provider = TracerProvider(resource=resource.merge(Resource({"service.version": __version__})))
        if exporter is not None:
            provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            for name in tracing.exporters(environ):
                if name == "otlp":
                    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
                    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
                elif name == "console":
                    provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
                # none: spans are still made (and sampled), and go nowhere
        started = cls(provider)
        started._hook()
        return started

    def stop(self, wait: float = STOP_SECONDS) -> None:
        """Export what the batch processors hold, for at most `wait` seconds: a collector that does
        not answer must not hold up a restart (the exporter would wait out its timeout,
        OTEL_EXPORTER_OTLP_TIMEOUT, 10 s by default, and the SDK up to 30 s a processor)."""
        self._unhook()
        exporting = threading.Thread(target=self.provider.shutdown, name="lbauth-otel-stop", daemon=True)
        exporting.start()
        exporting.join(wait)
        if exporting.is_alive():
            logs.event(log, f"the OpenTelemetry collector did not take the last spans within {wait:g} s: "
                            "stopping without them", logging.WARNING)

    def _hook(self) -> None:
        plans.statement_span = self.statement_span
        event.listen(Engine, "before_cursor_execute", self._before_cursor_execute)
        event.listen(Engine, "after_cursor_execute", self._after_cursor_execute)
        event.listen(Engine, "handle_error", self._handle_error)

    def _unhook(self) -> None:
        if plans.statement_span == self.statement_span:
            plans.statement_span = None
        for name, listener in (("before_cursor_execute", self._before_cursor_execute),
                               ("after_cursor_execute", self._after_cursor_execute),
                               ("handle_error", self._handle_error)):
            if event.contains(Engine, name, listener):
                event.remove(Engine, name, listener)

    # ---- the trace under way ------------------------------------------------------------------------

    @staticmethod
    def traceparent() -> str | None:
        """The current span's W3C `traceparent`, None outside any trace."""
        span_context = trace.get_current_span().get_span_context()
        if not span_context.is_valid:
            return None
        return f"00-{span_context.trace_id:032x}-{span_context.span_id:016x}-{int(span_context.trace_flags):02x}"

    @staticmethod
    def enter(context: otel_context.Context) -> object:
        """Make `context` current (in this task and what it starts); `leave` with what it returns."""
        return otel_context.attach(context)

    @staticmethod
    def leave(token: Any) -> None:
        otel_context.detach(token)

    # ---- requests ------------------------------------------------------------------------------------

    def request_started(self, connection: object, method: str, headers: Any) -> otel_context.Context:
        """The SERVER span of the request whose headers just arrived on `connection`, continuing the
        caller's trace (`traceparent`, through the OTEL_PROPAGATORS, W3C by default); the context to
        run the request in. Named by its method until the route is known."""
        parent = propagate.extract(headers)
        span = self.tracer.start_span(method, context=parent, kind=SpanKind.SERVER,
                                      attributes={"http.request.method": method})
        setattr(connection, _SERVER_SPAN, span)
        return trace.set_span_in_context(span, parent)

    def request_finished(self, connection: object, route: str, method: str, path: str, status: int,
                         request_id: str | None) -> None:
        """End the request's span: named `METHOD ROUTE` (RFC 6570-ish: `{id}` for a path segment),
        with the route, the path (no query string) and the status."""
        span = getattr(connection, _SERVER_SPAN, None)
        if span is None:
            return
        setattr(connection, _SERVER_SPAN, None)
        named = self._routes.get((method, route))
        if named is None:
            template = route_template(route)
            named = self._routes[(method, route)] = (f"{method} {template}" if template else method, template)
        span.update_name(named[0])
        if named[1]:
            span.set_attribute("http.route", named[1])
        span.set_attribute("url.path", redact(path))  # as the access log: a credential pasted in a path is not kept
        span.set_attribute("http.response.status_code", status)
        if request_id:
            span.set_attribute("lbauth.request_id", request_id)
        if status >= 500:
            span.set_attribute("error.type", str(status))
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def request_abandoned(self, connection: object) -> None:
        """The connection closed before the request was answered."""
        span = getattr(connection, _SERVER_SPAN, None)
        if span is not None:
            setattr(connection, _SERVER_SPAN, None)
            span.set_attribute("error.type", "connection_closed")
            span.set_status(Status(StatusCode.ERROR))
            span.end()

    # ---- the database --------------------------------------------------------------------------------

    def statement_span(self, conn: Any, plan: Any) -> Any:
        """storage/db/plans.py's hook: the span of one statement sent straight to the driver, inside
        a traced request (a periodic job's statements make no trace of their own)."""
        if not trace.get_current_span().is_recording():
            return _NO_SPAN
        return _Span(self._statement(conn.dialect.name, plan.sql))

    def _statement(self, system: str, sql: str) -> Any:
        key = (system, sql)
        described = self._described.get(key)
        if described is None:
            if len(self._described) >= _DESCRIBED_MAX:
                self._described.clear()
            described = self._described[key] = describe_statement(system, sql)
        return self.tracer.start_span(described[0], kind=SpanKind.CLIENT, attributes=described[1])

    def _before_cursor_execute(self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                               executemany: bool) -> None:
        if context is None or not counts_statements(statement) or not trace.get_current_span().is_recording():
            return
        setattr(context, _STATEMENT_SPAN, self._statement(conn.dialect.name, statement))

    @staticmethod
    def _after_cursor_execute(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any,
                              executemany: bool) -> None:
        span = getattr(context, _STATEMENT_SPAN, None)
        if span is not None:
            setattr(context, _STATEMENT_SPAN, None)
            span.end()

    @staticmethod
    def _handle_error(exception_context: Any) -> None:
        context = exception_context.execution_context
        span = getattr(context, _STATEMENT_SPAN, None)
        if span is not None:
            setattr(context, _STATEMENT_SPAN, None)
            failed(span, exception_context.original_exception)
            span.end()

    # ---- outbound calls ------------------------------------------------------------------------------

    @staticmethod
    def outbound_attributes(url: str, method: str) -> dict[str, Any]:
        return outbound_attributes(url, method)

    @staticmethod
    def failed_as(span: Any, error_type: str) -> None:
        failed_as(span, error_type)

    @staticmethod
    def http_outcome(span: Any, status: int | None, error: BaseException | None) -> None:
        """An outbound HTTP call's answer on its span: the status (4xx and 5xx fail it), or the
        failure's type (no answer: refused, timed out)."""
        if status is not None:
            span.set_attribute("http.response.status_code", status)
            if status >= 400:
                span.set_attribute("error.type", str(status))
                span.set_status(Status(StatusCode.ERROR))
        elif error is not None:
            failed(span, error)

    @contextmanager
    def client_span(self, name: str, attributes: Mapping[str, Any], *, traceparent: str | None = None,
                    headers: Any = None) -> Iterator[Any]:
        """A CLIENT span around an outbound call: a child of the current span, or with `traceparent`
        of that remote parent (a webhook queued by an earlier request, maybe in another process).
        `headers` get the span's `traceparent` (only webhooks send it: lbauth's receivers asked for
        its events; a stranger's metadata document is fetched without it). An exception marks the
        span failed with its type, never its message."""
        parent = _W3C.extract({"traceparent": traceparent}) if traceparent else None
        span = self.tracer.start_span(name, context=parent, kind=SpanKind.CLIENT, attributes=attributes)
        if headers is not None:
            _W3C.inject(headers, context=trace.set_span_in_context(span))
        try:
            yield span
        except BaseException as exc:
            failed(span, exc)
            raise
        finally:
            span.end()


class _Span:
    """A statement's span as a context manager (a class: a generator-based one costs more)."""

    __slots__ = ("span",)

    def __init__(self, span: Any) -> None:
        self.span = span

    def __enter__(self) -> Any:
        return self.span

    def __exit__(self, kind: Any, exc: BaseException | None, traceback: Any) -> None:
        if exc is not None:
            failed(self.span, exc)
        self.span.end()


class _NoSpan:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_SPAN = _NoSpan()


def failed_as(span: Any, error_type: str) -> None:
    """Mark a span failed, `error_type` saying how (OpenTelemetry's `error.type`)."""
    span.set_attribute("error.type", error_type)
    span.set_status(Status(StatusCode.ERROR))


def failed(span: Any, exc: BaseException) -> None:
    """Mark a span failed by the exception's type: its message may hold values (a driver's error
    names the parameters it was given), so it is never recorded."""
    failed_as(span, type(exc).__qualname__)


def describe_statement(system: str, sql: str) -> tuple[str, dict[str, str]]:
    """A statement's span name (`SELECT users`) and attributes (OpenTelemetry's database
    conventions): the SQL as compiled, with placeholders, never the values bound to them."""
    words = sql.split(None, 1)
    operation = words[0].upper() if words else "SQL"
    table = _TABLE.search(sql)
    attributes = {"db.system.name": system, "db.operation.name": operation, "db.query.text": sql}
    if table:
        attributes["db.collection.name"] = table[1]
    return (f"{operation} {table[1]}" if table else operation), attributes


_GROUP = re.compile(r"\((?:\?P<(\w+)>)?[^()]*\)")


def route_template(pattern: str) -> str:
    """A route's URL pattern (a regular expression, lbauth/app.py) as a template: `{id}` for each
    group, no `?` or escapes (`/account/sessions/([^/]+)/end` -> `/account/sessions/{id}/end`);
    empty for requests no route answered."""
    if pattern == "unmatched":
        return ""
    template = _GROUP.sub(lambda match: "{" + (match[1] or ("path" if ".+" in match[0] or ".*" in match[0]
                                                             else "id")) + "}", pattern)
    template = template.replace("/?", "/").replace("\\", "")
    return template or "/"


def outbound_attributes(url: str, method: str) -> dict[str, Any]:
    """An outbound HTTP call's attributes: the method and where it goes (scheme, host, port), not
    its path or query, which may hold a secret (a webhook URL with a token in it)."""
    parts = urlsplit(url)
    attributes: dict[str, Any] = {"http.request.method": method, "url.scheme": parts.scheme,
                                  "server.address": parts.hostname or ""}
    try:
        port = parts.port
    except ValueError:
        port = None
    attributes["server.port"] = port or (443 if parts.scheme == "https" else 80)
    return attributes

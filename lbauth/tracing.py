"""OpenTelemetry tracing's switch (LBAUTH_OTEL=on, docs/operations.md "Tracing").

This module imports nothing beyond the standard library: the domain core asks it for the current
W3C `traceparent` (a queued webhook carries it), and a server with tracing off never imports
OpenTelemetry. `start` imports lbauth.otel, which holds everything that needs the SDK
(`pip install 'lbauth[otel]'`), and makes it `active`; while `active` is None every hook here costs
one comparison.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lbauth.otel import Tracing

# The running tracing of this process (lbauth.otel.Tracing), or None: tracing is off.
active: Tracing | None = None

# What `lbauth serve` needs with LBAUTH_OTEL=on: module -> the package that brings it.
_NEEDED = (("opentelemetry.sdk.trace", "opentelemetry-sdk"),
           ("opentelemetry.exporter.otlp.proto.http.trace_exporter", "opentelemetry-exporter-otlp-proto-http"))
EXPORTERS = ("otlp", "console", "none")  # OTEL_TRACES_EXPORTER's values lbauth knows


class TracingUnavailable(Exception):
    """LBAUTH_OTEL=on cannot be honoured: one line that says why (a missing package, an exporter
    or protocol lbauth does not ship)."""


def require(environ: Mapping[str, str] | None = None) -> None:
    """Before `lbauth serve` starts anything: the SDK and the exporter are importable, and the
    OTEL_* variables ask for an exporter lbauth has. Raises TracingUnavailable naming what is missing."""
    environ = os.environ if environ is None else environ
    for module, package in _NEEDED:
        try:
            importlib.import_module(module)
        except ImportError:
            raise TracingUnavailable(f"LBAUTH_OTEL=on needs the {package} package: pip install 'lbauth[otel]'") \
                from None
    exporters(environ)


def exporters(environ: Mapping[str, str]) -> list[str]:
    """OTEL_TRACES_EXPORTER (default otlp) as a list; OTLP only over HTTP with protobuf."""
    names = [name.strip().lower() for name in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",") if name.strip()]
    for name in names:
        if name not in EXPORTERS:
            raise TracingUnavailable(f"OTEL_TRACES_EXPORTER: lbauth exports to {', '.join(EXPORTERS)} "
                                     f"(got {name!r})")
    if "otlp" in names:
        for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = environ.get(variable, "").strip().lower()
            if protocol:
                if protocol != "http/protobuf":
                    raise TracingUnavailable(f"{variable}: lbauth sends OTLP over HTTP, http/protobuf "
                                             f"(got {protocol!r}); point it at the collector's HTTP port (4318)")
                break
    return names or ["none"]


def start(*, exporter: Any = None, environ: Mapping[str, str] | None = None) -> Tracing:
    """Tracing on in this process: the SDK's tracer provider, its span processors and the hooks.
    Call it in the process that serves (after `lbauth serve` forked its workers: the batch
    processor's thread does not survive a fork). `exporter`: one SpanExporter, exported to at once
    (tests); default: OTEL_TRACES_EXPORTER's, through a batch processor."""
    global active
    from lbauth import otel
    if active is not None:
        stop()
    active = otel.Tracing.start(exporter=exporter, environ=os.environ if environ is None else environ)
    return active


def stop() -> None:
    """Export what is left, and tracing off."""
    global active
    tracing, active = active, None
    if tracing is not None:
        tracing.stop()


def traceparent() -> str | None:
    """The W3C `traceparent` of the work under way (what a webhook it queues carries on), None when
    tracing is off or no trace is under way."""
    return None if active is None else active.traceparent()

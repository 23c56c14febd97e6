"""OpenTelemetry tracing of runs: off (and free) unless an OTLP endpoint is configured.

The runner and the dispatcher talk to a :class:`Tracer` port (:mod:`fleet.agents.tracing`, whose
names this module re-exports): a run span, a span per model call and per tool call, events for
steps that ran nothing. :data:`NOOP` answers every call at once with shared do-nothing objects;
OpenTelemetry itself is imported only when tracing is on, the first time a run needs the tracer
(after a prefork worker forked). Spans follow the GenAI
semantic conventions (``invoke_agent`` / ``chat`` / ``execute_tool``) plus ``fleet.*`` ids and
labels. Prompt and tool contents are recorded only with
``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``, redacted with the store's Redactor.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from fleet.agents.tracing import NOOP, NoopTracer, Span, Tracer

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

__all__ = [
    "NOOP",
    "NoopTracer",
    "Span",
    "Tracer",
    "capture_wanted",
    "install",
    "reset",
    "shutdown",
    "tracer",
    "wanted",
]

log = logging.getLogger(__name__)

#: Either variable turns tracing on (the OTLP exporter reads them, and the rest, itself).
ENDPOINT_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
#: Opt-in to prompt, reply and tool argument/result contents on spans.
CAPTURE_VAR = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
#: service.name when neither OTEL_SERVICE_NAME nor OTEL_RESOURCE_ATTRIBUTES names one.
DEFAULT_SERVICE = "fleet"


# -- the process's tracer --------------------------------------------------------------------------


class _Process:
    """This process's decision: the tracer, and the provider it configured (to flush at exit)."""

    lock = threading.Lock()
    tracer: Tracer | None = None
    provider: TracerProvider | None = None


def wanted(env: Mapping[str, str] | None = None) -> bool:
    """Does the environment ask for tracing (an OTLP endpoint set, the SDK not disabled)?"""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(env.get(var, "").strip() for var in ENDPOINT_VARS)


def capture_wanted(env: Mapping[str, str] | None = None) -> bool:
    """Has the user opted in to recording prompt and tool contents on spans?"""
    env = os.environ if env is None else env
    return env.get(CAPTURE_VAR, "").strip().lower() in ("true", "span_only", "span_and_event")


def tracer() -> Tracer:
    """This process's tracer, decided on first use: :data:`NOOP` unless tracing is wanted."""
    found = _Process.tracer
    if found is not None:
        return found
    with _Process.lock:
        if _Process.tracer is None:
            _Process.tracer = _configure() if wanted() else NOOP
        return _Process.tracer


def _configure() -> Tracer:
    """A TracerProvider exporting OTLP/HTTP in batches; NOOP (with one warning) if it can't."""
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from fleet.agents.otel import OtelTracer
    except ImportError as exc:
        log.warning(
            "%s is set but OpenTelemetry is not installed (no module %s): tracing stays off; "
            "install it with: pip install 'fleet[otel]'",
            next(v for v in ENDPOINT_VARS if os.environ.get(v, "").strip()),
            exc.name or exc,
        )
        return NOOP
    try:
        for var in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
            protocol = os.environ.get(var, "").strip()
            if protocol and protocol != "http/protobuf":
                log.warning("%s=%s: fleet exports OTLP over http/protobuf only", var, protocol)
                break
        resource = Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(Resource({"service.name": DEFAULT_SERVICE}))
        provider = TracerProvider(resource=resource)  # flushed at exit (shutdown_on_exit)
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    except Exception as exc:  # a bad OTEL_* value must not stop runs
        log.warning("OpenTelemetry tracing could not start, it stays off: %s", exc)
        return NOOP
    if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        trace.set_tracer_provider(provider)  # instrumented libraries' spans join our traces
    _Process.provider = provider
    return OtelTracer.of(provider, capture_content=capture_wanted())


def install(provider: TracerProvider, *, capture_content: bool = False) -> Tracer:
    """Test hook: make ``provider`` (e.g. with an InMemorySpanExporter) this process's tracer."""
    from fleet.agents.otel import OtelTracer

    with _Process.lock:
        found = _Process.tracer = OtelTracer.of(provider, capture_content=capture_content)
    return found


def reset() -> None:
    """Test hook: forget the decision (the next :func:`tracer` call decides again)."""
    with _Process.lock:
        _Process.tracer = None
        _Process.provider = None


def shutdown() -> None:
    """Flush and stop the exporter this module configured (a worker process is ending)."""
    with _Process.lock:
        provider, _Process.provider = _Process.provider, None
        if provider is not None:
            _Process.tracer = NOOP
    if provider is not None:
        provider.shutdown()

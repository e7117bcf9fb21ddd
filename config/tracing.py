"""OpenTelemetry traces of the job and the web app, configured by the standard OTEL_* variables and nothing else.

Tracing is on when any OTEL_* variable is set (unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none): spans
go through a batch processor to an OTLP/HTTP (protobuf) endpoint, OTEL_EXPORTER_OTLP_ENDPOINT or the SDK's default
http://localhost:4318. With none set nothing here runs: the SDK is not even imported, the code's spans are the
OpenTelemetry API's no-op, and no thread is started.

A tracing backend must never change what a run does. The spans are exported by the processor's own thread, and
at exit the process waits at most FLUSH_BOUND_SECONDS for what is still queued: a collector that is down, refuses, or
accepts and never answers costs a night at most that, and one warning line on stderr; the exit code is the run's.
`TRACEPARENT` (and `TRACESTATE`) in the environment, as a traced scheduler passes them, make every span of the
process a child of that trace.
"""

import atexit
import functools
import logging
import os
import threading

from opentelemetry import trace

logger = logging.getLogger(__name__)

# How long the process waits at exit for its last spans to reach the collector (less after a stop: cut_flush).
FLUSH_BOUND_SECONDS = 3.0
flush_bound = FLUSH_BOUND_SECONDS
DEFAULT_ENDPOINT = "http://localhost:4318"  # the SDK's, for the warning line
SUPPORTED_PROTOCOL = "http/protobuf"
UNDELIVERED = "tracing: spans not delivered to {endpoint} within {bound:g}s ({reason}); the run is unaffected"
UNSUPPORTED = "tracing off: {variable}={value!r} is not supported here (only otlp over http/protobuf)"


def tracing_wanted(environ=os.environ) -> bool:
    """Any OTEL_* variable asks for traces, the SDK's defaults filling in the rest, except the two that say no."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(name.startswith("OTEL_") for name in environ)


@functools.cache  # once per process: `manage.py runserver` imports config/wsgi.py too
def configure_tracing() -> None:
    """Before Django handles anything: the command (manage.py) and the web app (wsgi.py). The SDK reads the rest of
    the variables itself."""
    environ = os.environ
    if not tracing_wanted(environ):
        return
    unsupported = unsupported_setting(environ)
    if unsupported:
        logger.warning(UNSUPPORTED.format(variable=unsupported[0], value=unsupported[1]))
        return
    # Imported here: with tracing off, the process pays for none of it.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # The resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES) and the sampler (OTEL_TRACES_SAMPLER, _ARG) come
    # from the environment. No shutdown hook of the SDK's: its wait at exit is unbounded.
    provider = TracerProvider(resource=Resource.create(), shutdown_on_exit=False)
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    exporter = DeliveryRecord(OTLPSpanExporter(), endpoint=endpoint or DEFAULT_ENDPOINT)
    processor = BatchSpanProcessor(exporter)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    atexit.register(flush_at_exit, processor, exporter)

    DjangoInstrumentor().instrument(tracer_provider=provider)
    trace_statements(provider)
    continue_parent_trace(environ)


def unsupported_setting(environ) -> tuple[str, str] | None:
    exporters = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporters != "otlp":
        return "OTEL_TRACES_EXPORTER", exporters
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if variable in environ:
            protocol = environ[variable].strip().lower()
            return None if protocol == SUPPORTED_PROTOCOL else (variable, protocol)
    return None


def trace_statements(provider) -> None:
    """Every statement on a Django database connection as a database client span (psycopg's instrumentation): its
    SQL text, never its parameter values. Django sets its own cursor class on each new connection after connecting,
    which undoes the instrumentor's patch of `psycopg.connect`, so the traced cursor wraps Django's class instead."""
    from django.db.backends.signals import connection_created
    from opentelemetry.instrumentation.psycopg import _new_cursor_factory

    traced_classes = {}

    def trace_connection(sender, connection, **kwargs):
        if connection.vendor != "postgresql":
            return
        base = connection.connection.cursor_factory
        if base not in traced_classes:
            traced_classes[base] = _new_cursor_factory(base_factory=base, tracer_provider=provider)
        connection.connection.cursor_factory = traced_classes[base]

    connection_created.connect(trace_connection, weak=False, dispatch_uid="config.tracing")


def continue_parent_trace(environ) -> None:
    """TRACEPARENT / TRACESTATE (W3C trace context, the specification's environment carrier) become the parent of
    the process's spans."""
    from opentelemetry import context, propagate

    carrier = {key: environ[name] for key, name in (("traceparent", "TRACEPARENT"), ("tracestate", "TRACESTATE"))
               if name in environ}
    if carrier:
        context.attach(propagate.extract(carrier))


class DeliveryRecord:
    """The exporter, counting the span batches it failed to deliver: at exit, one warning line instead of the SDK's
    line per retry and per batch (its loggers are quiet, config/settings.py LOGGING)."""

    def __init__(self, exporter, *, endpoint: str):
        self.exporter = exporter
        self.endpoint = endpoint
        self.failed = 0

    def export(self, spans):
        from opentelemetry.sdk.trace.export import SpanExportResult

        result = self.exporter.export(spans)
        if result is not SpanExportResult.SUCCESS:
            self.failed += 1
        return result

    def shutdown(self):
        self.exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.exporter.force_flush(timeout_millis)


def cut_flush(seconds: float) -> None:
    """The flush at exit waits at most `seconds`: a process asked to stop has only what is left of its bound."""
    global flush_bound
    flush_bound = min(flush_bound, seconds)


def flush_at_exit(processor, exporter: DeliveryRecord) -> None:
    """Export what is still queued, waiting at most flush_bound. The SDK's shutdown may wait for a
    collector up to 30 s, so it runs in a daemon thread of its own that the process stops waiting for at the bound
    and abandons, with the exporter's thread, at exit. One warning line if any span was lost."""
    flush = threading.Thread(target=processor.shutdown, name="tracing-flush", daemon=True)
    flush.start()
    flush.join(flush_bound)
    if flush.is_alive() or exporter.failed:
        reason = "still waiting for the collector" if flush.is_alive() else (
            f"{exporter.failed} batch(es) failed: the collector refused them or is unreachable")
        logger.warning(UNDELIVERED.format(endpoint=exporter.endpoint, bound=round(flush_bound, 1), reason=reason))

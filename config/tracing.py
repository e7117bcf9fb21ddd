"""OpenTelemetry traces of the job and the web app, configured by the standard OTEL_* variables.

Only two entry points trace: `manage.py purge_delisted` (manage.py) and the web app (config/wsgi.py), each with its
own default service name; every other management command stays untraced whatever the environment holds. Tracing is
on when any OTEL_* variable is set (unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none): spans go through a
batch processor to an OTLP/HTTP (protobuf) endpoint, OTEL_EXPORTER_OTLP_ENDPOINT or the SDK's default
http://localhost:4318. With none set nothing here runs: the SDK is not even imported, the code's spans are the
OpenTelemetry API's no-op, and no thread is started.

A tracing backend must never change what a run does. The spans are exported by the SDK's batch processor in its
own thread, and the flush at the end (flush_traces) is the processor's shutdown, bounded by FLUSH_BOUND_SECONDS, as
each export is by the exporter's own timeout: a collector that is down, refuses, or accepts and never answers costs a
night at most that, and one warning line on stderr; the exit code is the run's. `TRACEPARENT` (and `TRACESTATE`) in
the environment, as a traced scheduler passes them, make every span of the process a child of that trace.
"""

import atexit
import logging
import os
import re

from opentelemetry import trace

logger = logging.getLogger(__name__)

JOB_SERVICE_NAME = "catalog-delisted-retention"
WEB_SERVICE_NAME = "catalog-web"
# How long the process waits at the end for its last spans to reach the collector: the export in flight, then one
# export of the whole queue (a batch is the queue), each bounded by the exporter's own timeout, half of this.
FLUSH_BOUND_SECONDS = 3.0
QUEUED_SPANS = 2048  # the SDK's default queue; a span beyond it is dropped, never waited for
DEFAULT_ENDPOINT = "http://localhost:4318"  # the SDK's, for the warning line
SUPPORTED_PROTOCOL = "http/protobuf"
# The web app's requests left untraced unless OTEL_PYTHON_DJANGO_EXCLUDED_URLS says otherwise: Prometheus' scrapes.
EXCLUDED_URLS = r"/metrics(\?|$)"
UNDELIVERED = "tracing: spans not delivered to {endpoint} ({reason}); the run is unaffected"
FAILED_BATCHES = "{failed} batch(es) failed: the collector answered with an error or is unreachable"
UNSUPPORTED = "tracing off: {variable}={value!r} is not supported here (only otlp over http/protobuf)"

_flush = None  # (processor, exporter, endpoint) until flush_traces has run


def tracing_wanted(environ=os.environ) -> bool:
    """Any OTEL_* variable asks for traces, the SDK's defaults filling in the rest, except the two that say no."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if environ.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    return any(name.startswith("OTEL_") for name in environ)


def configure_tracing(*, service_name: str, web: bool = False) -> None:
    """Once a process, after Django's setup (the log format first, for the warning lines) and before it handles
    anything: the job (manage.py, the benchmark's worker) and the web app (wsgi.py, with `web`). The SDK reads the
    rest of the variables itself."""
    global _flush
    environ = os.environ
    if _flush is not None or not tracing_wanted(environ):
        return
    unsupported = unsupported_setting(environ)
    if unsupported:
        logger.warning(UNSUPPORTED.format(variable=unsupported[0], value=unsupported[1]))
        return
    # Imported here: with tracing off, the process pays for none of it.
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    import config.database.base

    # The sampler (OTEL_TRACES_SAMPLER, _ARG) comes from the environment. No shutdown hook of the SDK's: its wait at
    # exit is unbounded.
    provider = TracerProvider(resource=resource(service_name, environ), shutdown_on_exit=False)
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    exporter = counting_exporter(timeout=FLUSH_BOUND_SECONDS / 2)
    processor = BatchSpanProcessor(exporter, max_queue_size=QUEUED_SPANS, max_export_batch_size=QUEUED_SPANS)
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    _flush = processor, exporter, endpoint or DEFAULT_ENDPOINT
    atexit.register(flush_traces)  # the web app's; the job flushes at the end of its run

    config.database.base.statement_tracer = provider.get_tracer("config.database")
    if web:
        trace_requests(provider, environ)
    continue_parent_trace(environ)


def resource(service_name: str, environ):
    """The process as a tracing backend lists it: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over the
    defaults, the entry point's own name, the project's version and APP_ENV."""
    from django.conf import settings
    from opentelemetry.sdk.resources import OTELResourceDetector, Resource
    from opentelemetry.semconv.attributes.deployment_attributes import DEPLOYMENT_ENVIRONMENT_NAME
    from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME, SERVICE_VERSION

    from config.version import VERSION

    defaults = {SERVICE_NAME: service_name, SERVICE_VERSION: VERSION, DEPLOYMENT_ENVIRONMENT_NAME: settings.APP_ENV}
    return Resource.create({**defaults, **OTELResourceDetector().detect().attributes})


def unsupported_setting(environ) -> tuple[str, str] | None:
    exporters = environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower()
    if exporters != "otlp":
        return "OTEL_TRACES_EXPORTER", exporters
    for variable in ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        if variable in environ:
            protocol = environ[variable].strip().lower()
            return None if protocol == SUPPORTED_PROTOCOL else (variable, protocol)
    return None


def trace_requests(provider, environ) -> None:
    """Each request a server span by the current HTTP conventions (http.request.method, url.path,
    http.response.status_code), named by its route's template; /metrics left out unless the environment names the
    URLs to leave out."""
    # The instrumentation's own switch to the stable HTTP conventions, read when it instruments.
    environ.setdefault("OTEL_SEMCONV_STABILITY_OPT_IN", "http")
    from opentelemetry.instrumentation.django import DjangoInstrumentor

    chosen = any(name in environ for name in ("OTEL_PYTHON_DJANGO_EXCLUDED_URLS", "OTEL_PYTHON_EXCLUDED_URLS"))
    DjangoInstrumentor().instrument(
        tracer_provider=provider, excluded_urls=None if chosen else EXCLUDED_URLS, response_hook=name_by_route,
    )


def name_by_route(span, request, response) -> None:
    """The instrumentation's response hook: the route's template as http.route and in the span's name, and url.path,
    which the conventions require of a server span and the instrumentation leaves out."""
    from opentelemetry.semconv.attributes.http_attributes import HTTP_ROUTE
    from opentelemetry.semconv.attributes.url_attributes import URL_PATH

    if not span.is_recording():
        return
    span.set_attribute(URL_PATH, request.path)
    match = request.resolver_match
    if match is not None and match.route:
        route = route_template(match.route)
        span.set_attribute(HTTP_ROUTE, route)
        span.update_name(f"{request.method} {route}")


def route_template(route: str) -> str:
    """A Django route as a template: `admin/(?P<app_label>auth|catalog)/$` (a regex route) is
    `/admin/<app_label>/`, in the syntax of path()'s routes, which stay as written."""
    template = re.sub(r"\(\?P<(\w+)>[^()]*\)", r"<\1>", route)
    return "/" + template.replace("^", "").replace("$", "").lstrip("/")


def continue_parent_trace(environ) -> None:
    """TRACEPARENT / TRACESTATE (W3C trace context, the specification's environment carrier) become the parent of
    the process's spans."""
    from opentelemetry import context, propagate

    carrier = {key: environ[name] for key, name in (("traceparent", "TRACEPARENT"), ("tracestate", "TRACESTATE"))
               if name in environ}
    if carrier:
        context.attach(propagate.extract(carrier))


def counting_exporter(*, timeout: float):
    """The OTLP/HTTP exporter, each export (its retries included) bounded by `timeout`, counting the span batches it
    failed to deliver: at the end one warning line says so, instead of the SDK's line per retry and per batch (its
    loggers are quiet, config/settings.py LOGGING)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    class CountingExporter(OTLPSpanExporter):
        failed = 0

        def export(self, spans):
            result = super().export(spans)
            self.failed += result is not SpanExportResult.SUCCESS
            return result

    return CountingExporter(timeout=timeout)


def flush_traces() -> None:
    """Export what is still queued, once a process (the job calls it at the end of its run, atexit for the web app):
    the processor's shutdown, which waits for the export in flight and one more, of what is queued, each within the
    exporter's timeout, so at most FLUSH_BOUND_SECONDS. One warning line if any span was lost."""
    global _flush
    if _flush is None:
        return
    (processor, exporter, endpoint), _flush = _flush, None
    processor.shutdown()
    if exporter.failed:
        logger.warning(UNDELIVERED.format(endpoint=endpoint, reason=FAILED_BATCHES.format(failed=exporter.failed)))

"""The run's trace, in the OpenTelemetry API only: config.tracing decides whether spans go anywhere (without OTEL_*
variables they are the API's no-op). One root span per run, `purge_delisted`, carries what the design document's
observability table asks of a trace: the run id as the correlation id, the tenant marked not applicable (the job
is not per tenant), and here also the effective limits, the outcome and the counts. The service opens the child
spans with `traced` (docs/tracing.md lists them)."""

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode

from config.logging import first_line
from retention.limits import PurgeLimits
from retention.results import DELETED_COUNTS, PurgeResult
from retention.session import StopRun

tracer = trace.get_tracer("retention")


def run_attributes(*, run_id: str, database: str, limits: PurgeLimits, dry_run: bool) -> dict:
    """The root span's attributes known at the start: the limits as `retention.limit.<field>`, durations in seconds."""
    return {
        "retention.run_id": run_id, "correlation_id": run_id, "tenant_id": "not_applicable",
        "retention.dry_run": dry_run, "retention.database": database,
        **{f"retention.limit.{field.name}": seconds_or_value(getattr(limits, field.name))
           for field in dataclasses.fields(limits)},
    }


def result_attributes(result: PurgeResult) -> dict:
    """The root span's attributes at the end: how the run ended and what it deleted (a dry run: would delete)."""
    attributes = {
        "retention.outcome": str(result.outcome), "retention.stop_reason": str(result.stop_reason),
        "retention.batches": result.batches_processed, "retention.culprit_count": result.culprit_count,
        **{f"retention.{count}": getattr(result, count) for count in DELETED_COUNTS},
    }
    if result.has_more is not None:  # a span attribute has no null
        attributes["retention.has_more"] = result.has_more
    return attributes


def current_trace_id() -> str | None:
    """The run's trace id as 32 lowercase hex digits, as tracing backends show it; None when tracing is off."""
    context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(context.trace_id) if context.is_valid else None


def seconds_or_value(value):
    return value.total_seconds() if isinstance(value, timedelta) else value


@contextmanager
def traced(name: str, attributes: dict | None = None) -> Iterator[Span]:
    """A span of the run around the block. An exception that leaves it is the span's failure; StopRun is not: it is
    how a run ends between batches, and the root span's stop_reason says why."""
    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except StopRun:
            raise
        except BaseException as error:
            failed(span, error)
            raise


def failed(span: Span, error: BaseException) -> None:
    """A failure as tracing backends show one: the span's error status (the error's first line) and an exception
    event."""
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, first_line(error)))

"""The run's trace, in the OpenTelemetry API only: config.tracing decides whether spans go anywhere. One root span per
run, `purge_delisted` (run_span), carries the run id as the correlation id, the limits, the outcome and the counts;
the service opens the child spans with `traced`, config.database adds each statement's (docs/tracing.md).
"""

import dataclasses
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from opentelemetry import context, trace
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import Span, Status, StatusCode

from config.logging import first_line
from retention.limits import PurgeLimits
from retention.results import DELETED_COUNTS, PurgeResult
from retention.stopping import StopRun

tracer = trace.get_tracer("retention")
RUN_SPAN = context.create_key("retention.run_span")


@contextmanager
def run_span(run_id: uuid.UUID) -> Iterator[Span]:
    """The run's root span, carrying its run id, opened by whoever starts the run first: the command before it parses
    its options (its option errors and its final line are lines of the run), or the service called on its own (the
    benchmark, tests). Within a run span already open, that one: the service finds the command's."""
    opened = context.get_value(RUN_SPAN)
    if opened is not None:
        yield opened
        return
    ids = {"retention.run_id": str(run_id), "correlation_id": str(run_id), "tenant_id": "not_applicable"}
    with traced("purge_delisted", ids) as span:
        token = context.attach(context.set_value(RUN_SPAN, span))
        try:
            yield span
        finally:
            context.detach(token)


def run_attributes(*, database: str, limits: PurgeLimits, dry_run: bool) -> dict:
    """The root span's attributes once the run has its limits: `retention.limit.<field>`, durations in seconds."""
    return {
        "retention.dry_run": dry_run, "retention.database": database,
        **{f"retention.limit.{field.name}": seconds_or_value(getattr(limits, field.name))
           for field in dataclasses.fields(limits)},
    }


def result_attributes(result: PurgeResult) -> dict:
    """The root span's attributes at the end: how the run ended and what it deleted (a dry run: would delete)."""
    attributes = {
        "retention.outcome": str(result.outcome), "retention.stop_reason": str(result.stop_reason),
        "retention.batches": result.batches_processed, "retention.batch_retries": result.batch_retries,
        "retention.culprit_count": result.culprit_count,
        **{f"retention.{count}": getattr(result, count) for count in DELETED_COUNTS},
    }
    if result.has_more is not None:  # a span attribute has no null
        attributes["retention.has_more"] = result.has_more
    return attributes


def current_trace_id() -> str | None:
    """The run's trace id as 32 lowercase hex digits, as tracing backends show it; None when tracing is off or the
    trace is not sampled (TRACEPARENT's flags 00): nothing of it is exported, so no backend would find it."""
    span_context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(span_context.trace_id) if span_context.trace_flags.sampled else None


def seconds_or_value(value):
    return value.total_seconds() if isinstance(value, timedelta) else value


@contextmanager
def traced(name: str, attributes: dict | None = None) -> Iterator[Span]:
    """A span of the run around the block. An exception that leaves it is the span's failure; StopRun is not: it is
    how a run ends between batches, and the root span's stop_reason says why; nor is SystemExit, whose status the
    command sets before it exits (purge_delisted.Command.fail)."""
    with tracer.start_as_current_span(
        name, attributes=attributes, record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except (StopRun, SystemExit):
            raise
        except BaseException as error:
            failed(span, error)
            raise


def failed(span: Span, error: BaseException) -> None:
    """A failure as tracing backends show one: the span's error status (the error's first line), error.type (the
    error's class) and an exception event."""
    span.set_attribute(ERROR_TYPE, f"{type(error).__module__}.{type(error).__qualname__}")
    span.record_exception(error)
    span.set_status(Status(StatusCode.ERROR, first_line(error)))

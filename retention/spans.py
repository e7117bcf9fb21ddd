"""The run's trace, in the OpenTelemetry API only: config.tracing decides whether spans go anywhere. One root span per
run, `purge_delisted` (run_span), opened by the command before it parses its options, carries the run id as the
correlation id, the limits, the outcome and the counts; the service opens the child spans with `traced`,
config.database adds each statement's (docs/tracing.md).
"""

import dataclasses
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from opentelemetry import trace
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.trace import Span, Status, StatusCode

from config.logging import first_line
from retention.limits import PurgeLimits
from retention.results import DELETED_COUNTS, PurgeResult
from retention.session import StopRun

tracer = trace.get_tracer("retention")


def run_span(run_id: uuid.UUID):
    """The run's root span, carrying its run id."""
    ids = {"retention.run_id": str(run_id), "correlation_id": str(run_id), "tenant_id": "not_applicable"}
    return traced("purge_delisted", ids)


def run_attributes(*, database: str, limits: PurgeLimits, dry_run: bool) -> dict:
    """The root span's attributes once the run has its limits: `retention.limit.<field>`, durations in seconds."""
    values = {field.name: getattr(limits, field.name) for field in dataclasses.fields(limits)}
    return {"retention.dry_run": dry_run, "retention.database": database} | {
        f"retention.limit.{name}": value.total_seconds() if isinstance(value, timedelta) else value
        for name, value in values.items()
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


@contextmanager
def traced(name: str, attributes: dict | None = None) -> Iterator[Span]:
    """A span of the run around the block. An exception that leaves it is the span's failure; StopRun is not: it is
    how a run ends between batches, and the root span's stop_reason says why; nor is SystemExit (`--help`)."""
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


def failed(span: Span, error: BaseException | str) -> None:
    """A failure as tracing backends show one: the span's error status (the error's first line), and for an
    exception error.type (its class) and an exception event."""
    if isinstance(error, BaseException):
        span.set_attribute(ERROR_TYPE, f"{type(error).__module__}.{type(error).__qualname__}")
        span.record_exception(error)
        error = first_line(error)
    span.set_status(Status(StatusCode.ERROR, error))

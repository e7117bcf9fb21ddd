"""Log formatters for stderr: `text` for people, `json` for journald / Loki. Both stamp records in ISO 8601 UTC,
render each structured field (`extra`) once — the message says what happened, the fields say which and how many —
and keep every line within MAX_LINE_BYTES, so that syslog and journald never split a record. Under systemd each line
starts with its syslog priority (JournalStreamHandler), which journald reads and strips."""

import io
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone

from opentelemetry import trace
from pythonjsonlogger import json as jsonlogger

MAX_LINE_BYTES = 8192
# An error as one line: its first, within this. A trigger's message can run to kilobytes, and a run's result carries
# twenty culprits' errors: stdout stays small.
ERROR_LINE_BYTES = 400
# What every LogRecord has: anything else on a record came in through `extra`.
RECORD_ATTRIBUTES = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def utc_timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds")


def extra_fields(record: logging.LogRecord) -> dict:
    return {key: value for key, value in vars(record).items() if key not in RECORD_ATTRIBUTES}


def shortened(text: str, limit: int, *, keep: str = "head") -> str:
    """`text` within `limit` bytes of UTF-8; a traceback keeps its tail, where the error is."""
    if len(text.encode()) <= limit:
        return text
    marker = "…[truncated]…"
    room = max(0, limit - len(marker.encode()))
    data = text.encode()
    cut = data[len(data) - room:] if keep == "tail" else data[:room]
    cut = cut.decode(errors="ignore")
    return marker + cut if keep == "tail" else cut + marker


def first_line(error: BaseException) -> str:
    """An error's first line, within ERROR_LINE_BYTES."""
    return shortened((str(error).strip().splitlines() or [type(error).__name__])[0], ERROR_LINE_BYTES)


def rendered(value) -> str:
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=str)
    text = str(value)
    return json.dumps(text) if not text or any(c.isspace() or c in '"=' for c in text) else text


class TextFormatter(logging.Formatter):
    """`2026-12-03T03:30:00.123+00:00 INFO retention.service purge started run_id=… cutoff=…`; a traceback follows
    on its own lines."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{key}={rendered(value)}" for key, value in extra_fields(record).items())
        line = f"{utc_timestamp(record)} {record.levelname} {record.name} {record.getMessage()}"
        line = shortened(f"{line} {fields}" if fields else line, MAX_LINE_BYTES)
        if record.exc_info:
            lines = self.formatException(record.exc_info).splitlines()
            line += "".join(f"\n{shortened(traceback_line, MAX_LINE_BYTES)}" for traceback_line in lines)
        return line


class JsonFormatter(jsonlogger.JsonFormatter):
    """One JSON object per line: time, level, logger, message, the structured fields, and a traceback as one string
    (`exc_info`). A line that would pass MAX_LINE_BYTES has its longest strings shortened (a traceback from the top)."""

    def __init__(self, *args, **kwargs):
        super().__init__(
            "%(levelname)s %(name)s %(message)s",
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp="time",
            json_ensure_ascii=False,
        )

    def process_log_record(self, log_data: dict) -> dict:
        line = json.dumps(log_data, default=str, ensure_ascii=False)
        excess = len(line.encode()) - MAX_LINE_BYTES
        longest_first = sorted((key for key, value in log_data.items() if isinstance(value, str)),
                               key=lambda key: -len(log_data[key]))
        for key in longest_first:
            if excess <= 0:
                break
            size = len(log_data[key].encode())
            log_data[key] = shortened(log_data[key], max(64, size - excess - 64),
                                      keep="tail" if key == "exc_info" else "head")
            excess -= size - len(log_data[key].encode())
        return log_data


# Fields every line of the process carries while a `carried` block lasts: a job's run_id and trace_id, on the lines
# outside its spans too (the trace's flush warning after the root span ended) and those of its other threads.
CARRIED: dict = {}


@contextmanager
def carried(**fields) -> Iterator[dict]:
    """Every log line of the block carries `fields` (those not None), and any set in the yielded dict."""
    previous = dict(CARRIED)
    CARRIED.update(fields)
    try:
        yield CARRIED
    finally:
        CARRIED.clear()
        CARRIED.update(previous)


def current_trace_id() -> str | None:
    """The trace id of the span in progress as 32 lowercase hex digits, as tracing backends show it; None when
    tracing is off or the trace is not sampled (TRACEPARENT's flags 00): nothing of it is exported."""
    context = trace.get_current_span().get_span_context()
    return trace.format_trace_id(context.trace_id) if context.trace_flags.sampled else None


class TraceContext(logging.Filter):
    """Stamps a record with the trace_id and span_id of the span in progress (current_trace_id), so that a log line
    and its trace find each other. Then the CARRIED fields a record has not got."""

    def filter(self, record: logging.LogRecord) -> bool:
        if trace_id := current_trace_id():
            record.trace_id = trace_id
            record.span_id = trace.format_span_id(trace.get_current_span().get_span_context().span_id)
        for name, value in CARRIED.items():
            if value is not None and not hasattr(record, name):
                setattr(record, name, value)
        return True


# syslog's priorities (RFC 5424) of the logging levels: what journald files a line under (`journalctl -p`).
SYSLOG_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))
DEBUG_PRIORITY = 7


def syslog_prefixed(text: str, stream, level: int) -> str:
    """`text` with `<priority>` before each of its lines when `stream` is the journal's, which systemd names in
    JOURNAL_STREAM (`device:inode` of the stream it connected); as it is anywhere else. journald reads the prefix and
    strips it (SyslogLevelPrefix=, on by default), so the stored message stays plain text or pure JSON."""
    journal_stream = os.environ.get("JOURNAL_STREAM")
    if not journal_stream:
        return text
    try:
        status = os.fstat(stream.fileno())
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return text  # not a file: a test's StringIO
    if journal_stream != f"{status.st_dev}:{status.st_ino}":
        return text
    priority = next((priority for floor, priority in SYSLOG_PRIORITIES if level >= floor), DEBUG_PRIORITY)
    return "\n".join(f"<{priority}>{line}" for line in text.split("\n"))


class JournalStreamHandler(logging.StreamHandler):
    """A stream handler whose lines carry their syslog priority when the stream is the journal's (syslog_prefixed)."""

    def format(self, record: logging.LogRecord) -> str:
        return syslog_prefixed(super().format(record), self.stream, record.levelno)


class RunLog(logging.LoggerAdapter):
    """Adds the run's fields (its run_id) to every record as structured fields, keeping the call's own `extra`."""

    def process(self, msg, kwargs):
        kwargs["extra"] = {**self.extra, **kwargs.get("extra", {})}
        return msg, kwargs

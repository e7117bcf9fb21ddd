"""Django's PostgreSQL backend, each statement, COMMIT and ROLLBACK a database client span when tracing is on
(config.tracing): described by OpenTelemetry's stable database conventions, the SQL text with its placeholders and
never a value, and named by the statement's name in its .sql file (config.statements) where it has one, as
db.query.summary, else by its operation and table.

A span is made only inside a recording span of the process's own (a run, a web request): a statement with nothing
to belong to (a migration, a system check, an excluded /metrics scrape) makes no trace of its own. The statements go
through a cursor class of ours, a thin subclass of the one Django picks, Django's own time zone statement on a new
connection included; COMMIT and ROLLBACK, which psycopg sends without a cursor, through the connection wrapper's
public commit() and rollback(). A named (server-side) cursor, which Django builds apart (QuerySet.iterator(), the
admin's choice lists), goes unseen. With tracing off a statement pays one module attribute read."""

import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager

from django.db.backends.postgresql import base
from opentelemetry import trace
from opentelemetry.semconv.attributes.db_attributes import (
    DB_COLLECTION_NAME, DB_NAMESPACE, DB_OPERATION_NAME, DB_QUERY_SUMMARY, DB_QUERY_TEXT, DB_RESPONSE_STATUS_CODE,
    DB_SYSTEM_NAME, DbSystemNameValues,
)
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from opentelemetry.trace import SpanKind, Status, StatusCode

from config.statements import NAME_OF_STATEMENT

# The tracer of the statements' spans: set by config.tracing.configure_tracing, None while the process does not trace.
statement_tracer: trace.Tracer | None = None
# The one statement of Django's own in a run: a new connection's, when the server's time zone is not UTC.
NAME_OF_STATEMENT[base.DatabaseWrapper.ops_class(None).set_time_zone_sql()] = "time zone"

_NAME = r'(?>"[^"]+"|[A-Za-z_][\w$]*+)'
_TABLE = rf"(?P<table>(?>{_NAME}(?:\.{_NAME})?))"
# A statement that writes is described by its write, whatever reads around it: a batch's `WITH batch AS (SELECT …),
# deleted_cards AS (DELETE FROM catalog.property_object_cards …) SELECT …` is a DELETE of catalog.property_object_cards.
_WRITES = {
    "INSERT": re.compile(rf"\bINSERT\s+INTO\s+{_TABLE}", re.IGNORECASE),
    "DELETE": re.compile(rf"\bDELETE\s+FROM\s+(?:ONLY\s+)?{_TABLE}", re.IGNORECASE),
    "UPDATE": re.compile(rf"\bUPDATE\s+(?:ONLY\s+)?{_TABLE}(?:\s+(?:AS\s+)?{_NAME})?\s+SET\b", re.IGNORECASE),
}
_READ_FROM = re.compile(rf"\bFROM\s+{_TABLE}(?!\s*\()", re.IGNORECASE)  # a table, not a function's FROM


@functools.lru_cache(maxsize=256)  # a run repeats a few statements; a batch's parse costs ~0.15 ms
def operation_and_collection(sql: str) -> tuple[str, str | None]:
    """The conventions' db.operation.name and db.collection.name of a statement, parsed from its text: its write and
    the table written, else its first keyword (a WITH that only reads: SELECT) and, for a SELECT, the first table it
    reads; identifiers as written, without their quotes."""
    writes = [(match.start(), verb, match) for verb, pattern in _WRITES.items() if (match := pattern.search(sql))]
    if writes:
        _, operation, write = min(writes, key=lambda found: found[0])
        return operation, write.group("table").replace('"', "")
    operation = sql.split(None, 1)[0].upper() if sql.strip() else "UNKNOWN"
    operation = "SELECT" if operation == "WITH" else operation
    read = _READ_FROM.search(sql) if operation == "SELECT" else None
    return operation, read and read.group("table").replace('"', "")


def connection_attributes(connection) -> dict:
    """Where a statement ran: the database (db.namespace) and the server, as libpq connected to them."""
    info = connection.info
    return {DB_NAMESPACE: info.dbname, SERVER_ADDRESS: info.host, SERVER_PORT: int(info.port)}


@contextmanager
def statement_span(connection, sql) -> Iterator[None]:
    """The span of one statement on `connection` (psycopg's), when the process traces and a recording span is in
    progress. A failure is the span's: error.type is the SQLSTATE when the server gave one, else the error's class."""
    if statement_tracer is None or connection is None or not trace.get_current_span().is_recording():
        yield
        return
    text = (sql if isinstance(sql, str) else sql.as_string(connection)).strip()
    operation, collection = operation_and_collection(text)
    summary = NAME_OF_STATEMENT.get(text)
    attributes = {DB_SYSTEM_NAME: DbSystemNameValues.POSTGRESQL.value, DB_OPERATION_NAME: operation,
                  DB_QUERY_TEXT: text, **connection_attributes(connection)}
    if collection:
        attributes[DB_COLLECTION_NAME] = collection
    if summary:
        attributes[DB_QUERY_SUMMARY] = summary
    with statement_tracer.start_as_current_span(
        summary or (f"{operation} {collection}" if collection else operation), kind=SpanKind.CLIENT,
        attributes=attributes, record_exception=False, set_status_on_exception=False,
    ) as span:
        try:
            yield
        except Exception as error:
            code = getattr(error, "sqlstate", None)
            span.set_attribute(ERROR_TYPE, code or f"{type(error).__module__}.{type(error).__qualname__}")
            if code:
                span.set_attribute(DB_RESPONSE_STATUS_CODE, code)
            span.set_status(Status(StatusCode.ERROR, (str(error).strip().splitlines() or [""])[0][:400]))
            raise


class TracedStatements:
    """Mixed into Django's psycopg cursor class: each statement a span."""

    def execute(self, query, params=None, **kwargs):
        with statement_span(self.connection, query):
            return super().execute(query, params, **kwargs)

    def executemany(self, query, params_seq, **kwargs):
        with statement_span(self.connection, query):
            return super().executemany(query, params_seq, **kwargs)


@functools.cache
def traced_cursor_class(cursor_class: type) -> type:
    return type(f"Traced{cursor_class.__name__}", (TracedStatements, cursor_class), {})


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self):
        params = super().get_connection_params()
        params["cursor_factory"] = traced_cursor_class(params["cursor_factory"])
        return params

    def commit(self):
        with statement_span(self.connection, "COMMIT"):
            super().commit()

    def rollback(self):
        with statement_span(self.connection, "ROLLBACK"):
            super().rollback()

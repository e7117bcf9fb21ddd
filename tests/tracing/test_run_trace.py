"""A run's trace as a real OTLP/HTTP receiver gets it from `manage.py purge_delisted`: one trace whose one root
carries the run id, a span per batch under its phase, the statements, commits and rollbacks under the batches by
OpenTelemetry's database conventions (SQL text, no values), each statement named by its name in
retention/sql/statements.sql, the resource naming the service, its version and environment, the log lines carrying
the trace's ids, failures as error status, and TRACEPARENT as the parent."""

import json
import os
import re
import uuid
from pathlib import Path

import pytest
from django.db.backends.postgresql.base import DatabaseWrapper
from opentelemetry.semconv.attributes.db_attributes import (
    DB_COLLECTION_NAME, DB_NAMESPACE, DB_OPERATION_NAME, DB_QUERY_SUMMARY, DB_QUERY_TEXT, DB_RESPONSE_STATUS_CODE,
    DB_SYSTEM_NAME,
)
from opentelemetry.semconv.attributes.deployment_attributes import DEPLOYMENT_ENVIRONMENT_NAME
from opentelemetry.semconv.attributes.error_attributes import ERROR_TYPE
from opentelemetry.semconv.attributes.server_attributes import SERVER_ADDRESS, SERVER_PORT
from opentelemetry.semconv.attributes.service_attributes import SERVICE_NAME, SERVICE_VERSION
from psycopg.conninfo import conninfo_to_dict

from config.version import VERSION
from retention.statements import STATEMENTS
from tests.factories import (
    BuildingDisplayOverrideFactory, ProjectCardFactory, PropertyObjectCardFactory, PropertyObjectDisplayOverrideFactory,
)
from tests.support import PROJECT_ROOT, database_url_of_tests, deletes_refused, first_delete_fails
from tests.tracing.conftest import run_traced
from tests.tracing.receiver import ReceivedSpan, span_tree

HEX32, HEX16 = re.compile(r"[0-9a-f]{32}"), re.compile(r"[0-9a-f]{16}")
# Set by `make trace-picture`: the span tree of the first test's run is written there for docs/tracing.md.
TRACE_PICTURE = os.environ.get("TRACE_PICTURE")
# What the picture shows beside each span's name; a statement's name says which it is.
PICTURE_ATTRIBUTES = ("retention.phase", "retention.count", "retention.selected", "retention.deleted_cards",
                      "retention.outcome")
# The statements that end a transaction or mark a point in it: named by their operation, as they carry no table.
TRANSACTION_CONTROL = {"COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE"}
TIME_ZONE_SQL = DatabaseWrapper.ops_class(None).set_time_zone_sql()


def only_trace(receiver) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
    """The one trace the run sent: its root span, opened once, and all its spans."""
    traces = receiver.traces()
    assert len(traces) == 1, f"expected one trace, got {len(traces)}"
    (spans,) = traces.values()
    roots = [span for span in spans if span.name == "purge_delisted"]
    assert len(roots) == 1, f"the root span was opened {len(roots)} times"
    return roots[0], spans


def ancestors(span: ReceivedSpan, spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
    by_id = {s.span_id: s for s in spans}
    chain = []
    while span.parent_span_id in by_id:
        span = by_id[span.parent_span_id]
        chain.append(span)
    return chain


def picture_line(span: ReceivedSpan) -> str:
    shown = {key: span.attributes[key] for key in PICTURE_ATTRIBUTES if key in span.attributes}
    return "  " + " ".join(f"{key}={value}" for key, value in shown.items()) if shown else ""


@pytest.mark.django_db(transaction=True)
def test_a_run_is_one_trace_rooted_in_its_run_with_a_batch_span_per_batch_and_its_statements_under_them(receiver):
    cards = PropertyObjectCardFactory.create_batch(5, long_delisted=True)

    completed = run_traced(
        "purge_delisted", "--json", "--batch-size", "2", "--batch-pause-ms", "5", "-v", "2",
        receiver=receiver, LOG_FORMAT="json",
    )

    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    root, spans = only_trace(receiver)
    assert HEX32.fullmatch(result["trace_id"]) and root.trace_id == result["trace_id"]
    assert root.parent_span_id is None and root.status == "unset"
    assert root.attributes["retention.run_id"] == root.attributes["correlation_id"] == result["run_id"]
    assert root.attributes["tenant_id"] == "not_applicable" and root.attributes["retention.dry_run"] is False
    assert root.attributes["retention.limit.batch_size"] == 2
    assert root.attributes["retention.limit.max_duration"] == 1200.0  # durations in seconds
    assert root.attributes["retention.outcome"] == "completed"
    assert root.attributes["retention.deleted_property_object_cards"] == 5
    assert root.resource[SERVICE_NAME] == "catalog-delisted-retention"  # no OTEL_SERVICE_NAME: the job's own
    assert root.resource[SERVICE_VERSION] == VERSION
    assert root.resource[DEPLOYMENT_ENVIRONMENT_NAME] == "development"  # APP_ENV's default

    batches = [span for span in spans if span.name == "batch"]
    assert len(batches) == result["batches_processed"] == 3
    assert [batch.attributes["retention.deleted_cards"] for batch in batches] == [2, 2, 1]
    for batch in batches:
        chain = [span.name for span in ancestors(batch, spans)]
        assert chain[0] == "phase" and chain[-1] == "purge_delisted"
        statements = [span for span in spans if span.parent_span_id == batch.span_id and span.kind == "client"]
        assert [span.name for span in statements] == ["property_objects: batch", "COMMIT"]
        delete = statements[0].attributes
        assert (delete[DB_OPERATION_NAME], delete[DB_COLLECTION_NAME]) == ("DELETE", "catalog.property_object_cards")
    assert {span.name for span in spans} >= {"advisory_lock", "count_backlog", "phase", "scan_chunk", "pause"}

    # Every statement by the stable database conventions, named by its db.query.summary, else (COMMIT) by its
    # db.operation.name; its SQL text with placeholders and never a parameter value: the run id is only ever a
    # parameter (the session's application_name), the cards' ids only values in the database.
    statements = [span for span in spans if span.kind == "client"]
    database = conninfo_to_dict(database_url_of_tests())  # as libpq reads it: a Unix socket's directory is its host
    for span in statements:
        attributes = span.attributes
        assert attributes[DB_SYSTEM_NAME] == "postgresql" and attributes[DB_NAMESPACE] == database["dbname"]
        assert attributes[SERVER_ADDRESS] == database["host"]
        assert attributes[SERVER_PORT] == int(database.get("port") or 5432)
        assert attributes[DB_QUERY_TEXT] == attributes[DB_QUERY_TEXT].strip()
        assert span.name == attributes.get(DB_QUERY_SUMMARY, attributes[DB_OPERATION_NAME])
        assert "db.statement" not in attributes and "db.system" not in attributes
    assert {span.attributes[DB_OPERATION_NAME] for span in statements} == {"SELECT", "DELETE", "COMMIT"}
    secrets = [result["run_id"], *(str(card.id) for card in cards)]
    for span in statements:
        text = json.dumps(span.attributes)
        assert not any(secret in text for secret in secrets), span.attributes

    records = [json.loads(line) for line in completed.stderr.splitlines()]
    assert records and all(record["trace_id"] == root.trace_id for record in records)
    assert all(record["run_id"] == result["run_id"] for record in records)
    assert all(HEX16.fullmatch(record["span_id"]) for record in records)
    batch_lines = [record for record in records if record["message"] == "batch done"]
    assert [record["span_id"] for record in batch_lines] == [batch.span_id for batch in batches]
    completed_line = next(record for record in records if record["message"] == "purge completed")
    assert completed_line["span_id"] == root.span_id

    if TRACE_PICTURE:
        Path(PROJECT_ROOT, TRACE_PICTURE).write_text(span_tree(spans, show=picture_line) + "\n")


@pytest.mark.django_db(transaction=True)
def test_each_statement_is_named_by_its_name_in_statements_sql_and_none_by_a_bare_operation(receiver):
    # A batch in every phase, and a connection whose time zone is not Django's (PGTZ), so that Django sends its own
    # statement too.
    PropertyObjectCardFactory(long_delisted=True)
    ProjectCardFactory(long_delisted=True)
    PropertyObjectDisplayOverrideFactory(property_object_id=uuid.uuid4())
    BuildingDisplayOverrideFactory(project_id=uuid.uuid4())

    completed = run_traced("purge_delisted", "--json", receiver=receiver, PGTZ="Asia/Tokyo")

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["batches_processed"] == 4
    _, spans = only_trace(receiver)
    statements = [span for span in spans if span.kind == "client"]
    name_of_statement = {sql: name for name, sql in STATEMENTS.items()}
    named = {name_of_statement.get(span.attributes[DB_QUERY_TEXT]) for span in statements}
    assert {"set bounds", "advisory lock", "cutoff", "property_objects: batch", "projects: batch",
            "orphan_property_object_overrides: batch", "orphan_building_overrides: batch", "advisory unlock"} <= named
    for span in statements:
        text = span.attributes[DB_QUERY_TEXT]
        if text in name_of_statement:
            assert span.name == span.attributes[DB_QUERY_SUMMARY] == name_of_statement[text]
        elif text == TIME_ZONE_SQL:
            assert span.name == span.attributes[DB_QUERY_SUMMARY] == "time zone"
        else:  # the only other statements: the transactions' COMMITs
            assert span.name == span.attributes[DB_OPERATION_NAME] in TRANSACTION_CONTROL, span
    assert [span.name for span in statements].count("time zone") == 1  # the run's one connection, set up once
    assert not {span.name for span in statements} & {"SELECT", "WITH", "INSERT", "UPDATE", "DELETE", "SET"}


@pytest.mark.django_db(transaction=True)
def test_a_phase_that_runs_dry_on_an_empty_selection_ends_in_an_empty_batch_span_the_result_does_not_count(receiver):
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    completed = run_traced("purge_delisted", "--json", "--batch-size", "2", receiver=receiver)

    assert completed.returncode == 0, completed.stderr
    _, spans = only_trace(receiver)
    assert len([span for span in spans if span.name == "batch"]) == json.loads(completed.stdout)["batches_processed"]
    (empty,) = [span for span in spans if span.name == "empty_batch"]
    assert empty.attributes["retention.phase"] == "property_objects" and empty.attributes["retention.selected"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_dry_run_has_its_root_span_and_its_trace_id_in_the_result(receiver):
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    completed = run_traced("purge_delisted", "--dry-run", "--json", receiver=receiver)

    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    root, spans = only_trace(receiver)
    assert root.trace_id == result["trace_id"] and root.attributes["retention.dry_run"] is True
    assert root.attributes["retention.deleted_property_object_cards"] == 2
    assert not [span for span in spans if span.name == "batch"]


@pytest.mark.django_db(transaction=True)
def test_a_refused_batch_and_the_failed_run_have_error_status_and_the_culprit_is_an_event(receiver):
    poison, *_ = PropertyObjectCardFactory.create_batch(3, long_delisted=True)

    with deletes_refused(when=f"OLD.id = '{poison.id}'"):
        completed = run_traced("purge_delisted", "--json", receiver=receiver)

    assert completed.returncode == 1
    result = json.loads(completed.stdout)
    assert result["culprit_count"] == 1 and result["deleted_property_object_cards"] == 2
    root, spans = only_trace(receiver)
    assert root.status == "error" and root.attributes["retention.outcome"] == "failed"
    (batch,) = [span for span in spans if span.name == "batch"]
    assert batch.status == "error" and [name for name, _ in batch.events] == ["exception"]
    assert "deletes refused by the test" in batch.events[0][1]["exception.message"]
    (isolation,) = [span for span in spans if span.name == "isolate_culprits"]
    assert isolation.parent_span_id == batch.span_id
    assert [(name, attributes["card_id"]) for name, attributes in isolation.events] == [("culprit", str(poison.id))]

    # The refused statement: its SQLSTATE as error.type, then its transaction's ROLLBACK; in the isolation each
    # refused part rolls back to its savepoint.
    refused, rollback = [span for span in spans if span.parent_span_id == batch.span_id and span.kind == "client"]
    assert refused.name == "property_objects: batch" and refused.status == "error"
    assert refused.attributes[ERROR_TYPE] == refused.attributes[DB_RESPONSE_STATUS_CODE] == "P0001"
    assert rollback.name == "ROLLBACK" and rollback.status == "unset"
    isolation_statements = [span.name for span in sorted(spans, key=lambda span: span.start_ns)
                            if span.parent_span_id == isolation.span_id]
    assert {"property_objects: lock",  # the batch's rows locked again
            "SAVEPOINT", "property_objects: batch", "RELEASE", "ROLLBACK"} <= set(isolation_statements)
    assert isolation_statements[-1] == "COMMIT"


@pytest.mark.django_db(transaction=True)
def test_a_batch_retried_after_a_transient_error_carries_the_retry_as_an_event_and_counts_it(receiver):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)

    with first_delete_fails("40P01"):
        completed = run_traced("purge_delisted", "--json", receiver=receiver)

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["deleted_property_object_cards"] == 3
    _, spans = only_trace(receiver)
    (batch,) = [span for span in spans if span.name == "batch"]
    assert batch.status != "error" and batch.attributes["retention.retries"] == 1
    [(name, retry)] = batch.events
    assert (name, retry["attempt"], retry["sqlstate"]) == ("retry", 1, "40P01")


@pytest.mark.django_db(transaction=True)
def test_traceparent_makes_the_run_a_child_of_the_schedulers_trace(receiver):
    scheduler_trace, scheduler_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"

    completed = run_traced(
        "purge_delisted", "--json", receiver=receiver, TRACEPARENT=f"00-{scheduler_trace}-{scheduler_span}-01",
    )

    assert completed.returncode == 0, completed.stderr
    root, _ = only_trace(receiver)
    assert root.trace_id == scheduler_trace == json.loads(completed.stdout)["trace_id"]
    assert root.parent_span_id == scheduler_span

"""A failed run is found from its own output: its --json object (on every exit) and every stderr line, the final
error line included, carry its run id and trace id, and that trace id finds the run's one root span in the receiver,
which covers the final line. The resource names the service, its version and its environment."""

import json
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime

import pytest
from django.db import connection

from tests.factories import PropertyObjectCardFactory
from tests.support import deletes_refused, free_loopback_port
from tests.tracing.conftest import run_traced

FINAL_LINE_PREFIX = "purge_delisted: error: "


def unreachable_database() -> dict:
    return {"DATABASE_URL": f"postgres://postgres@127.0.0.1:{free_loopback_port()}/catalog"}


@contextmanager
def connection_lost_in_a_batch() -> Iterator[None]:
    """The job's session ends under its first batch: a trigger on the cards terminates the backend deleting them."""
    with connection.cursor() as cursor:
        cursor.execute("""
            CREATE FUNCTION public.lose_connection() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN OLD; END $$;
            CREATE TRIGGER lose_connection BEFORE DELETE ON catalog.property_object_cards
                FOR EACH ROW EXECUTE FUNCTION public.lose_connection();
        """)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER lose_connection ON catalog.property_object_cards; "
                           "DROP FUNCTION public.lose_connection()")


def refused_deletes_of(card):
    return deletes_refused(when=f"OLD.id = '{card.id}'")


FAILURES = {  # options, environment, what the database does, exit status
    "unreachable-database": ((), unreachable_database, None, 1),
    "bad-option": (("--no-such-option",), dict, None, 2),
    "bad-limit": (("--batch-size", "0"), dict, None, 2),
    "culprits": ((), dict, refused_deletes_of, 1),
    "lost-connection": ((), dict, lambda card: connection_lost_in_a_batch(), 1),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("failure", FAILURES)
def test_a_failed_run_is_found_in_the_receiver_by_the_trace_id_its_own_output_carries(receiver, failure):
    options, environment, database_fault, exit_status = FAILURES[failure]
    card = PropertyObjectCardFactory(long_delisted=True)

    with database_fault(card) if database_fault else nullcontext():
        completed = run_traced("purge_delisted", "--json", *options, receiver=receiver, LOG_FORMAT="json",
                               **environment())

    assert completed.returncode == exit_status, completed.stderr
    (result,) = [json.loads(line) for line in completed.stdout.splitlines()]  # exactly one object
    assert result["outcome"] == "failed" and result["error"] and result["run_id"] and result["trace_id"]
    records = [json.loads(line) for line in completed.stderr.splitlines()]
    assert all((record["run_id"], record["trace_id"]) == (result["run_id"], result["trace_id"]) for record in records)
    final = records[-1]
    assert final["level"] == "ERROR" and final["message"] == FINAL_LINE_PREFIX + result["error"]

    # From the final line alone: its trace id finds the trace, its span id the run's root span, which ended after it.
    # The command opened it, once.
    spans = receiver.traces()[final["trace_id"]]
    (root,) = [span for span in spans if span.name == "purge_delisted"]
    assert root.span_id == final["span_id"] and root.parent_span_id is None and root.status == "error"
    assert root.attributes["retention.run_id"] == final["run_id"]
    assert root.attributes["retention.outcome"] == "failed"
    assert root.end_ns / 1e9 >= datetime.fromisoformat(final["time"]).timestamp()


@pytest.mark.django_db(transaction=True)
def test_the_resource_takes_otel_service_name_and_resource_attributes_over_its_defaults(receiver):
    completed = run_traced(
        "purge_delisted", "--json", receiver=receiver, OTEL_SERVICE_NAME="catalog-retention-eu",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment.name=staging", APP_ENV="development",
    )

    assert completed.returncode == 0, completed.stderr
    (spans,) = receiver.traces().values()
    assert spans[0].resource["service.name"] == "catalog-retention-eu"
    assert spans[0].resource["deployment.environment.name"] == "staging"


@pytest.mark.django_db(transaction=True)
def test_an_unsampled_parent_exports_nothing_and_the_run_reports_no_trace_id(receiver):
    PropertyObjectCardFactory(long_delisted=True)

    completed = run_traced(
        "purge_delisted", "--json", "-v", "2", receiver=receiver, LOG_FORMAT="json",
        TRACEPARENT="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
    )

    assert completed.returncode == 0, completed.stderr
    result = json.loads(completed.stdout)
    assert result["deleted_property_object_cards"] == 1 and result["trace_id"] is None
    records = [json.loads(line) for line in completed.stderr.splitlines()]
    assert records and all("trace_id" not in record and record["run_id"] == result["run_id"] for record in records)
    assert receiver.spans == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", [
    ("migrate",), ("check",), ("seed_demo_data", "--projects", "2", "--objects-per-project", "2"),
    ("purge_delisted", "--last-run"),  # which runs nothing
], ids=lambda command: " ".join(command[:2]))
def test_other_management_commands_send_no_trace_with_otel_variables_set(receiver, command):
    completed = run_traced(*command, receiver=receiver, APP_ENV="development")

    assert completed.returncode == 0, completed.stderr
    assert receiver.requests == 0 and receiver.spans == []

"""A batch on the happy path costs three round trips to the server: BEGIN, the one statement that locks, deletes
and counts, COMMIT. Counted on the wire: libpq's protocol trace of the job's own connection (PQtrace, through
psycopg's `pgconn.trace`), where every round trip ends with the server's ReadyForQuery."""

import re
import tempfile
from contextlib import contextmanager
from datetime import timedelta

import pytest
from psycopg.pq import Trace
from django.db import connection
from django.utils import timezone

from catalog.models import CardStatus, PropertyObjectCard
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory, PropertyObjectDisplayOverrideFactory
from tests.support import purge

pytestmark = pytest.mark.django_db(transaction=True)  # real transactions: BEGIN and COMMIT go over the wire


@contextmanager
def wire_trace():
    """The messages the job's connection exchanges in the block, one string each ("F\t<length>\t<type>\t..." sent,
    "B..." received)."""
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    with tempfile.TemporaryFile(mode="w+") as trace:
        pgconn.trace(trace.fileno())
        pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS)
        messages = []
        try:
            yield messages
        finally:
            pgconn.untrace()
            trace.seek(0)
            # A message's SQL text may span lines; every message starts a line with its direction and length.
            messages += re.split(r"\n(?=[FB]\t\d+\t)", trace.read().strip())


def round_trips(trace: list[str]) -> int:
    return sum(1 for message in trace if re.match(r"B\t\d+\tReadyForQuery", message))


def transactions(trace: list[str]) -> list[list[str]]:
    """The statements (SQL text) of each transaction, BEGIN to COMMIT."""
    found, current = [], None
    for message in trace:
        if not re.match(r"F\t\d+\t(Query|Parse)\t", message):
            continue
        if '"BEGIN"' in message:
            current = []
        elif '"COMMIT"' in message and current is not None:
            found.append(current)
            current = None
        elif current is not None:
            current.append(message)
    return found


def overdue_cards(count: int) -> None:
    project = ProjectCardFactory()
    for card in PropertyObjectCardFactory.create_batch(
        count, project_id=project.id, status=CardStatus.DELISTED, updated_at=timezone.now() - timedelta(days=40)
    ):
        PropertyObjectDisplayOverrideFactory(property_object_id=card.id)


def traced_run(batches: int, batch_size: int = 3) -> list[str]:
    overdue_cards(batches * batch_size)
    with wire_trace() as trace:
        result = purge(batch_size=batch_size)
    assert result.deleted_property_object_cards == batches * batch_size
    assert not PropertyObjectCard.objects.exists()
    return trace


def test_each_batch_of_a_run_costs_three_round_trips_begin_the_batch_commit():
    short, long = traced_run(batches=2), traced_run(batches=5)

    # The fixed cost of a run (lock, counts, the last empty selection of each phase) is the same in both.
    assert round_trips(long) - round_trips(short) == 3 * 3
    batch_transactions = [statements for statements in transactions(long) if any(
        "FOR UPDATE SKIP LOCKED" in statement and "DELETE FROM catalog.property_object_cards" in statement
        for statement in statements
    )]
    assert len(batch_transactions) == 5 + 1  # five full batches, then the one that finds the phase dry
    assert all(len(statements) == 1 for statements in batch_transactions), batch_transactions


def test_the_timeouts_are_set_once_for_the_session_not_in_every_transaction():
    trace = traced_run(batches=4)

    settings_statements = [
        message for message in trace if message.startswith("F") and "set_config('statement_timeout'" in message
    ]
    assert len(settings_statements) == 1, settings_statements


def test_only_the_batches_are_begun_and_committed_each_read_is_one_round_trip():
    trace = traced_run(batches=2)

    begun = transactions(trace)
    assert len(begun) == 2 + 1  # the batches, then the one that finds the phase dry: the counts, scans, lock are not
    assert all(any("DELETE FROM" in statement for statement in statements) for statements in begun), begun

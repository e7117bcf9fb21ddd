"""SIGTERM at the worst moments: just after the run checked for a stop and before its batch began, between two
statements of a transaction (where a cancel does nothing), and a cancel meant for a transaction that is over by the
time it would land. Real database, the session's own watcher."""

import threading
import time

import pytest
from django.db import connection

from catalog.models import PropertyObjectCard
from retention.results import StopReason
from retention.stopping import StopRequest, StopRun
from tests.factories import PropertyObjectCardFactory
from tests.support import job_session, purge

pytestmark = pytest.mark.django_db(transaction=True)


class StopAfterTheFirstCheck(StopRequest):
    """A SIGTERM that arrives right after the run's check before batch 1 (the first time the flag is read)."""

    def __init__(self):
        super().__init__()
        self.checks = 0

    @property
    def requested(self) -> bool:
        self.checks += 1
        if self.checks == 1:
            self.request()
            return False
        return super().requested


def test_a_stop_between_the_check_and_the_batch_deletes_nothing():
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)

    result = purge(stop=StopAfterTheFirstCheck(), batch_size=2)

    assert (result.stop_reason, result.batches_processed, result.deleted_property_object_cards) == ("stopped", 0, 0)
    assert PropertyObjectCard.objects.count() == 3
    assert result.has_more is True  # the end count still ran: no cancel was left over for it


def test_a_stop_between_two_statements_of_a_writing_transaction_sends_no_further_statement():
    session = job_session()
    with session.running(), pytest.raises(StopRun) as stopped:
        with session.transaction(writes=True) as cursor:
            cursor.execute("SELECT 1")
            session.stop.request()  # idle in transaction: a cancel now would do nothing
            time.sleep(0.3)
            cursor.execute("SELECT pg_sleep(30)")
    assert stopped.value.reason is StopReason.STOPPED


def test_a_stop_reaches_the_statement_in_flight_within_a_second():
    session = job_session()
    threading.Timer(0.3, session.stop.request).start()
    started = time.monotonic()
    with session.running(), pytest.raises(StopRun) as stopped:
        with session.transaction() as cursor:
            cursor.execute("SELECT pg_sleep(30)")
    assert stopped.value.reason is StopReason.STOPPED
    assert time.monotonic() - started < 1.5


def test_a_cancel_meant_for_a_transaction_that_ended_does_not_reach_the_next_statement():
    session = job_session()
    with session.running():
        for _ in range(20):  # the stop lands at a varying moment of a transaction that ends at once
            with session.transaction() as cursor:
                cursor.execute("SELECT 1")
                threading.Timer(0.001, session.stop.request).start()
        time.sleep(0.3)
        # What the run does after a stop (the end count, the unlock) runs to its end.
        with session.transaction() as cursor:
            cursor.execute("SELECT pg_sleep(1), 'finished'")
            assert cursor.fetchone()[1] == "finished"


def test_a_read_begun_after_the_stop_is_given_a_grace_then_interrupted_too():
    session = job_session()
    connection.ensure_connection()  # as a run's is, by then
    session.stop.request()
    started = time.monotonic()
    with session.running(), pytest.raises(StopRun) as stopped:
        with session.transaction() as cursor:  # the end count, behind a lock that is never released, say
            cursor.execute("SELECT pg_sleep(30)")
    assert stopped.value.reason is StopReason.STOPPED
    assert 1.5 < time.monotonic() - started < 3.5


def test_a_second_signal_does_not_put_the_run_s_end_off():
    stop = StopRequest()
    stop.request()
    first = stop.end_by()
    time.sleep(0.01)

    stop.request()  # a second Ctrl-C, or SIGTERM after SIGINT

    assert stop.end_by() == first

"""SIGTERM at the worst moments: just after the run checked for a stop and before its batch registered the
statement to cancel, and a cancel that is sent only once its transaction is over. Real database."""

import time

import psycopg
import pytest

from catalog.models import PropertyObjectCard
from retention.service import StopRequest
from tests.factories import PropertyObjectCardFactory
from tests.support import database_url_of_tests, purge

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


class LateCancel(StopRequest):
    """A stop whose cancel thread runs late, as on a busy host: its transaction may be over by then."""

    def cancel(self, registration: tuple) -> None:
        time.sleep(0.5)
        super().cancel(registration)


def test_a_late_cancel_does_not_reach_the_next_statement_on_the_connection():
    stop = LateCancel()
    with psycopg.connect(database_url_of_tests(), autocommit=True) as connection:
        with stop.cancelling(connection):
            stop.request()  # the transaction ends before the cancel is sent

        # What the run does next on the same session (the end count, the unlock) runs to its end.
        assert connection.execute("SELECT pg_sleep(1.5), 'finished'").fetchone()[1] == "finished"


def test_a_late_cancel_still_reaches_the_statement_it_was_meant_for():
    stop = LateCancel()
    with psycopg.connect(database_url_of_tests(), autocommit=True) as connection:
        with stop.cancelling(connection), pytest.raises(psycopg.errors.QueryCanceled):
            stop.request()
            connection.execute("SELECT pg_sleep(30)")

"""A stop at the worst moments, in the service itself: just after the run checked for a stop and before its batch
began, while a batch is in flight, and during the pause. The stop is a flag read before each batch: what was begun
runs to its end and commits whole, nothing more begins, and the run's sleep wakes within STOP_POLL."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections

from catalog.models import PropertyObjectCard
from retention.session import STOP_POLL, StopRequest, StopRun
from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import WAIT_SECONDS, CatalogState, held_batch, overdue_cards, query, wait_for
from tests.support import Progress, job_session, purge

pytestmark = pytest.mark.django_db(transaction=True)


class StopJustAfterTheNextCheck(StopRequest):
    """A SIGTERM that arrives right after the run's next look at the flag, once `armed`."""

    def __init__(self):
        self.armed = self.asked = False

    def request(self) -> None:
        self.asked = True

    @property
    def requested(self) -> bool:
        if self.armed and not self.asked:
            self.request()  # just after this read
            return False
        return self.asked


def test_a_stop_between_the_check_and_the_batch_lets_that_batch_run_whole_and_starts_no_other():
    PropertyObjectCardFactory.create_batch(5, long_delisted=True)
    stop = StopJustAfterTheNextCheck()
    # Armed after batch 0: the stop comes just after the check before batch 1.
    progress = Progress(on_batch=lambda cards: setattr(stop, "armed", True))

    result = purge(stop=stop, progress=progress, batch_size=2)

    assert (result.stop_reason, result.batches_processed, result.deleted_property_object_cards) == ("stopped", 2, 4)
    assert result.has_more is True  # the end count ran after the stop, to its end
    assert PropertyObjectCard.objects.count() == 1


def test_a_stop_while_a_batch_is_in_flight_lets_it_commit_whole_and_starts_no_other():
    cards = overdue_cards(4, held=0)
    before, stop = CatalogState.read(), StopRequest()

    def stop_the_held_batch_then_let_it_go():
        try:
            wait_for(lambda: query("SELECT 1 FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
                                   " AND datname = current_database()"), what="the batch to be held")
            stop.request()
            time.sleep(0.3)  # a cancel, if anything sent one, would land now
            fault.open_gate()
        finally:
            connections.close_all()

    with held_batch() as fault:
        helper = threading.Thread(target=stop_the_held_batch_then_let_it_go)
        helper.start()
        result = purge(stop=stop, batch_size=2)
        helper.join(timeout=WAIT_SECONDS)

    assert (result.stop_reason, result.batches_processed, result.deleted_property_object_cards) == ("stopped", 1, 2)
    assert result.has_more is True
    after = CatalogState.read()
    after.assert_whole_batches_since(before)
    assert after.property_objects == {card.id for card in cards[2:]}


def test_a_stop_during_the_pause_wakes_the_run_within_the_poll_interval():
    session = job_session()
    threading.Timer(0.2, session.stop.request).start()
    started = time.monotonic()

    session.sleep(30)

    assert 0.2 <= time.monotonic() - started < 0.2 + STOP_POLL + 0.1


def test_the_pause_never_sleeps_past_the_run_s_deadline():
    session = job_session(max_duration=timedelta(seconds=0.3))
    started = time.monotonic()

    session.sleep(30)

    assert time.monotonic() - started < 0.3 + 0.1
    with pytest.raises(StopRun) as stopped:
        session.check()
    assert stopped.value.reason == "max_duration"

"""A first SIGTERM asks the run to stop before its next batch and cancels nothing: with nothing stuck the process exits
within EXIT_SECONDS at the default batch size, its batches whole; in the pause between batches it ends at once; a
batch in flight runs to its end, commits whole, and no other starts. The run ends `stopped` (exit 0) with `has_more`,
and the next run completes. Seen from outside: the process, its `--json` result and the catalog."""

import signal
import time

import pytest

from catalog.models import PropertyObjectCard
from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import (
    CatalogState, assert_the_next_run_completes, held_batch, insert_overdue_objects, overdue_cards, query, start_purge,
    stopped_within_bound, wait_for,
)
from tests.support import database_url_of_tests

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEFAULT_BATCH_SIZE = 2000
OVERDUE = 15 * DEFAULT_BATCH_SIZE  # about half a second of batches here: the run is still deleting at the signal


def test_sigterm_with_nothing_stuck_exits_within_a_second_at_the_default_batch_size_its_batches_whole():
    insert_overdue_objects(database_url_of_tests(), OVERDUE)
    job = start_purge("--json")
    wait_for(lambda: PropertyObjectCard.objects.count() < OVERDUE, what="the first batch")

    result, stderr = stopped_within_bound(job)

    assert job.returncode == 0, stderr
    assert f"batch_size={DEFAULT_BATCH_SIZE} " in stderr
    assert (result["stop_reason"], result["outcome"], result["has_more"]) == ("stopped", "stopped", True)
    deleted = result["deleted_property_object_cards"]
    assert deleted == DEFAULT_BATCH_SIZE * result["batches_processed"] and 0 < deleted < OVERDUE, result
    assert PropertyObjectCard.objects.count() == OVERDUE - deleted
    assert_the_next_run_completes()


def test_sigterm_during_a_long_batch_pause_ends_the_run_at_once():
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    job = start_purge("--json", "--batch-size", "1", "--batch-pause-ms", "60000")
    wait_for(lambda: PropertyObjectCard.objects.count() == 2, what="the first batch")

    result, stderr = stopped_within_bound(job)  # far less than the pause

    assert job.returncode == 0, stderr
    assert (result["stop_reason"], result["deleted_property_object_cards"], result["has_more"]) == ("stopped", 1, True)


def test_sigterm_during_a_batch_does_not_cancel_it_the_batch_commits_whole_and_no_other_starts():
    cards = overdue_cards(6, held=0, overrides=2)  # two a batch: batch 0 (held) takes cards 0 and 1
    before = CatalogState.read()

    with held_batch() as fault:
        job = start_purge("--json", "--batch-size", "2")
        backend = fault.wait_until_held(job)
        job.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert job.poll() is None, "the run ended while its batch was held"
        assert query("SELECT wait_event FROM pg_stat_activity WHERE pid = %s", [backend]) == [("PgSleep",)]
        result = fault.release(job)

    assert (result["stop_reason"], result["outcome"], result["has_more"]) == ("stopped", "stopped", True)
    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (1, 2)
    after = CatalogState.read()
    after.assert_whole_batches_since(before)
    assert after.property_objects == {card.id for card in cards[2:]}
    assert_the_next_run_completes()

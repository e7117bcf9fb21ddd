"""SIGTERM cancels the statement in flight: a run blocked behind another session's lock ends as `stopped` within
seconds and releases the advisory lock, for the start count and for the dry run's preview alike."""


import psycopg
import pytest

from catalog.models import PropertyObjectCard
from tests.factories import PropertyObjectCardFactory
from tests.support import database_url_of_tests
from tests.reliability.support import (
    job_backend_pids, job_lock_holders, query, start_purge, stopped_within_bound, wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NO_TIMEOUTS = {"DELISTED_RETENTION_LOCK_TIMEOUT_MS": "600000", "DELISTED_RETENTION_STATEMENT_TIMEOUT_MS": "600000"}


def waiting_on_a_lock() -> bool:
    return bool(job_backend_pids()) and bool(query(
        "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s) AND wait_event_type = 'Lock'", [job_backend_pids()]
    ))


@pytest.mark.parametrize("options", [("--json",), ("--json", "--dry-run")], ids=["start count", "dry-run preview"])
def test_sigterm_cancels_a_blocked_statement_and_the_run_ends_stopped(options):
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    with psycopg.connect(database_url_of_tests()) as other_session:  # its transaction stays open in the block
        other_session.execute("LOCK TABLE catalog.property_object_cards IN ACCESS EXCLUSIVE MODE")
        job = start_purge(*options, **NO_TIMEOUTS)
        wait_for(waiting_on_a_lock, what="the job to wait behind the table lock")
        result, stderr = stopped_within_bound(job)  # while the table lock is still held

    assert job.returncode == 0, stderr
    assert result["stop_reason"] == "stopped"
    assert job_lock_holders() == []


def test_sigterm_during_a_long_batch_pause_ends_the_run_at_once():
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    job = start_purge("--json", "--batch-size", "1", "--batch-pause-ms", "60000")
    wait_for(lambda: PropertyObjectCard.objects.count() == 2, what="the first batch")

    result, stderr = stopped_within_bound(job)  # far less than the pause

    assert job.returncode == 0, stderr
    assert (result["stop_reason"], result["deleted_property_object_cards"]) == ("stopped", 1)

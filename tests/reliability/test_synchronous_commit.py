"""A COMMIT that waits for a synchronous standby which is gone (wait event SyncRep) is under the run's time limit
and SIGTERM like every statement: statement_timeout does not bound that wait, so the job cancels it. PostgreSQL
then keeps the transaction committed locally and says so in a WARNING; the run counts the batch, says in one line
that the standby did not confirm it, and ends. A real primary with a real standby that is stopped."""

import subprocess
from collections.abc import Iterator

import psycopg
import pytest

from retention.service import SYNC_WAIT_CANCELLED_MESSAGE
from tests.reliability.support import finished, insert_overdue_objects, stopped_within_bound, wait_for
from tests.servers import Replica, migrate, streaming_replica
from tests.support import PROJECT_ROOT, manage_command

pytestmark = pytest.mark.slow

OVERDUE = 30
BATCH_SIZE = 10


@pytest.fixture
def standby_gone() -> Iterator[Replica]:
    """A primary with overdue cards whose commits wait for a synchronous standby that has stopped."""
    with streaming_replica() as replica:
        migrate(replica.primary_url)
        insert_overdue_objects(replica.primary_url, OVERDUE)
        replica.stop_standby()
        replica.require_synchronous_standby()
        yield replica


def start_purge(replica: Replica, *options: str) -> subprocess.Popen:
    return subprocess.Popen(
        manage_command("purge_delisted", "--json", "--batch-size", str(BATCH_SIZE), *options),
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": replica.primary_url, "LOG_LEVEL": "INFO"},
    )


def waiting_for_the_standby(replica: Replica) -> bool:
    with psycopg.connect(replica.primary_url, autocommit=True) as primary:
        return primary.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE application_name LIKE 'purge_delisted %' AND wait_event = 'SyncRep'"
        ).fetchone()[0] > 0


def committed_locally(replica: Replica) -> int:
    with psycopg.connect(replica.primary_url, autocommit=True) as primary:
        return OVERDUE - primary.execute("SELECT count(*) FROM catalog.property_object_cards").fetchone()[0]


def test_the_run_time_limit_ends_a_commit_waiting_for_a_gone_synchronous_standby_as_a_failed_run(standby_gone):
    job = start_purge(standby_gone, "--max-duration-seconds", "4")
    wait_for(lambda: waiting_for_the_standby(standby_gone), what="the batch's COMMIT waiting in SyncRep")

    result, stderr = finished(job)

    assert job.returncode == 1, stderr
    assert (result["stop_reason"], result["batches_processed"]) == ("failed", 1)
    assert result["error"] == SYNC_WAIT_CANCELLED_MESSAGE
    assert result["deleted_property_object_cards"] == BATCH_SIZE == committed_locally(standby_gone)
    # The warning, the "purge completed" line's error, and the run's one error line.
    assert stderr.count(SYNC_WAIT_CANCELLED_MESSAGE) == 3, stderr
    assert not waiting_for_the_standby(standby_gone)


def test_sigterm_ends_a_commit_waiting_for_a_gone_synchronous_standby(standby_gone):
    job = start_purge(standby_gone, "--max-duration-seconds", "600")
    wait_for(lambda: waiting_for_the_standby(standby_gone), what="the batch's COMMIT waiting in SyncRep")

    result, stderr = stopped_within_bound(job)

    assert job.returncode == 0, stderr
    assert (result["stop_reason"], result["batches_processed"]) == ("stopped", 1)
    assert result["deleted_property_object_cards"] == BATCH_SIZE == committed_locally(standby_gone)
    assert stderr.count(SYNC_WAIT_CANCELLED_MESSAGE) == 1, stderr

"""The job's session commits with `synchronous_commit = local` (retention.session): with a synchronous standby that is
gone, an ordinary COMMIT on the primary waits for it (wait event SyncRep) until cancelled, while the job's COMMITs do
not wait, and a run completes promptly. Its batches are durable on the primary alone: a failover may lose them, and
the next run chooses those cards again. A real primary whose synchronous standby has stopped."""

import subprocess
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.reliability.support import WAIT_SECONDS, finished, insert_overdue_objects, wait_for
from tests.servers import Replica, migrate, streaming_replica
from tests.support import PROJECT_ROOT, manage_command

pytestmark = pytest.mark.slow

OVERDUE = 30
BATCH_SIZE = 10
PROMPTLY = 5  # seconds from the process's start to its exit: a start-up, three batches and the counts


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
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": replica.primary_url, "LOG_LEVEL": "INFO",
             "DELISTED_RETENTION_METRICS_TEXTFILE": ""},  # not the checkout's .demo/ of development
    )


def waiting_for_the_standby(replica: Replica, pid: int) -> bool:
    with psycopg.connect(replica.primary_url, autocommit=True) as primary:
        return primary.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND wait_event = 'SyncRep'", [pid]
        ).fetchone()[0] > 0


def an_ordinary_commit_waits_for_the_standby(replica: Replica) -> None:
    """A session at the server's synchronous_commit commits a table and waits in SyncRep until it is cancelled."""
    with psycopg.connect(replica.primary_url, autocommit=True) as writer:
        commit = threading.Thread(target=writer.execute, args=("CREATE TABLE commit_probe ()",))
        commit.start()
        try:
            wait_for(lambda: waiting_for_the_standby(replica, writer.info.backend_pid),
                     what="an ordinary commit waiting for the gone standby")
        finally:
            with psycopg.connect(replica.primary_url, autocommit=True) as admin:
                admin.execute("SELECT pg_cancel_backend(%s)", [writer.info.backend_pid])
            commit.join(timeout=WAIT_SECONDS)


def test_with_a_gone_synchronous_standby_the_job_s_commits_do_not_wait_and_the_run_completes(standby_gone):
    an_ordinary_commit_waits_for_the_standby(standby_gone)

    started = time.monotonic()
    job = start_purge(standby_gone)
    result, stderr = finished(job)
    took = time.monotonic() - started

    assert job.returncode == 0, stderr
    assert (result["stop_reason"], result["outcome"], result["has_more"]) == ("completed", "completed", False)
    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (OVERDUE // BATCH_SIZE, OVERDUE)
    assert took < PROMPTLY, took
    with psycopg.connect(standby_gone.primary_url, autocommit=True) as primary:
        assert primary.execute("SELECT count(*) FROM catalog.property_object_cards").fetchone()[0] == 0

"""Replica-lag pacing of the real job against a real streaming standby (tests/servers.py): replay paused with
pg_wal_replay_pause() makes the standby lag; the job waits before its batches, stops with `replica_lag` (exit 0,
has_more) when the wait runs out, continues once replay resumes, and a SIGTERM ends the wait."""

import json
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from retention.pacing import replica_lag
from retention.session import Session
from tests.reliability.support import WAIT_SECONDS, insert_overdue_objects, stopped_within_bound, wait_for
from tests.servers import Replica, database_alias, migrate
from tests.support import PROJECT_ROOT, manage_command

pytestmark = pytest.mark.slow

MAX_LAG_SECONDS = 1
OVERDUE = 30
JOB_HOLDS_ITS_LOCK = "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'advisory' AND granted)"


@pytest.fixture(scope="module")
def catalog_replica(replica: Replica) -> Replica:
    migrate(replica.primary_url)
    return replica


@pytest.fixture
def overdue_catalog(catalog_replica: Replica) -> Iterator[None]:
    insert_overdue_objects(catalog_replica.primary_url, OVERDUE)
    yield
    with psycopg.connect(catalog_replica.primary_url, autocommit=True) as primary:
        primary.execute("TRUNCATE catalog.project_cards, catalog.property_object_cards")


@pytest.fixture
def lagging_standby(catalog_replica: Replica, django_db_blocker) -> Iterator[Replica]:
    """The standby with replay paused, lagging more than MAX_LAG_SECONDS behind the primary."""
    catalog_replica.pause_replay()
    try:
        with django_db_blocker.unblock(), database_alias("primary", catalog_replica.primary_url) as primary, \
                psycopg.connect(catalog_replica.primary_url, autocommit=True) as writer:
            writer.execute("CREATE TABLE IF NOT EXISTS wal_filler (written_at timestamptz DEFAULT now())")

            def lagging() -> bool:
                writer.execute("INSERT INTO wal_filler DEFAULT VALUES")
                return replica_lag(Session(primary)) > timedelta(seconds=MAX_LAG_SECONDS)

            wait_for(lagging, what=f"the paused standby to lag more than {MAX_LAG_SECONDS} s")
        yield catalog_replica
    finally:
        catalog_replica.resume_replay()


def start_purge(replica: Replica, *options: str) -> subprocess.Popen:
    return subprocess.Popen(
        manage_command("purge_delisted", "--json", "--max-replica-lag-seconds", str(MAX_LAG_SECONDS), *options),
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={"PATH": "/usr/bin:/bin", "DATABASE_URL": replica.primary_url, "LOG_LEVEL": "INFO",
             "DELISTED_RETENTION_METRICS_TEXTFILE": ""},  # not the checkout's .demo/ of development
    )


def wait_until_it_holds_its_lock(replica: Replica) -> None:
    """From when the job holds its lock it waits for the standby, which lags and that nothing resumes. Counting from
    the job's launch instead, a slow start-up on a busy host ate into a test's 2 s, or a SIGTERM came before the job
    could handle it."""
    with psycopg.connect(replica.primary_url, autocommit=True) as primary:
        wait_for(lambda: primary.execute(JOB_HOLDS_ITS_LOCK).fetchone()[0], what="the job to take its lock")


def finished(job: subprocess.Popen) -> tuple[dict, str]:
    stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
    assert job.returncode == 0, stderr
    return json.loads(stdout), stderr


def test_a_lagging_standby_stops_the_run_with_replica_lag_once_the_wait_runs_out(overdue_catalog, lagging_standby):
    result, stderr = finished(start_purge(lagging_standby, "--replica-lag-wait-seconds", "2"))

    assert (result["stop_reason"], result["outcome"], result["has_more"]) == ("replica_lag", "has_more", True)
    assert result["deleted_property_object_cards"] == 0  # it waited before the first batch
    assert result["replica_lag_wait_seconds"] >= 1.9
    assert "the standbys stayed behind" in stderr


def test_the_run_continues_once_replay_resumes(overdue_catalog, lagging_standby):
    job = start_purge(lagging_standby, "--replica-lag-wait-seconds", "60", "--batch-size", "10")
    wait_until_it_holds_its_lock(lagging_standby)
    time.sleep(2)
    lagging_standby.resume_replay()

    result, stderr = finished(job)

    assert (result["stop_reason"], result["deleted_property_object_cards"]) == ("completed", OVERDUE)
    assert result["replica_lag_wait_seconds"] >= 1.5
    assert "waited for the standbys" in stderr


def test_sigterm_ends_the_wait_for_the_standbys(overdue_catalog, lagging_standby):
    job = start_purge(lagging_standby, "--replica-lag-wait-seconds", "600")
    wait_until_it_holds_its_lock(lagging_standby)

    result, _ = stopped_within_bound(job)

    assert (result["stop_reason"], result["deleted_property_object_cards"]) == ("stopped", 0)
    assert result["replica_lag_wait_seconds"] < 60

"""The job behind a real PgBouncer (tests/servers.py). Transaction pooling: refused in one line naming the cause
and the remedy, nothing deleted, no lock left behind. Session pooling: works, two runs at once never overlap, and a
killed run's lock is gone by the next run."""

import json
import signal
import subprocess

import pytest

from catalog.models import PropertyObjectCard
from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import WAIT_SECONDS, held_batch, job_environment, job_lock_holders, wait_for
from tests.support import PROJECT_ROOT, manage_command

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def purge_through(url: str, *options: str, **environment: str) -> subprocess.Popen:
    return subprocess.Popen(
        manage_command("purge_delisted", "--json", *options), cwd=PROJECT_ROOT,
        env=job_environment(DATABASE_URL=url, **environment), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def test_through_transaction_pooling_the_job_refuses_deletes_nothing_and_leaves_no_lock(pgbouncer):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    job = purge_through(pgbouncer("transaction"))
    stdout, stderr = job.communicate(timeout=WAIT_SECONDS)

    assert job.returncode == 1, stderr
    [line] = stderr.strip().splitlines()
    assert "connection pooler" in line and "DELISTED_RETENTION_DATABASE_URL" in line
    assert stdout == ""
    assert PropertyObjectCard.objects.count() == 3
    assert job_lock_holders() == []


def test_through_session_pooling_two_runs_at_once_never_overlap(pgbouncer):
    PropertyObjectCardFactory.create_batch(200, long_delisted=True)
    url = pgbouncer("session")

    jobs = [
        purge_through(url, "--batch-size", "5", "--batch-pause-ms", "20", DELISTED_RETENTION_POOLER="session")
        for _ in range(2)
    ]
    results = []
    for job in jobs:
        stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
        assert job.returncode == 0, stderr
        results.append(json.loads(stdout))

    assert sorted(r["stop_reason"] for r in results) == ["completed", "lock_busy"]
    assert sum(r["deleted_property_object_cards"] for r in results) == 200
    assert not PropertyObjectCard.objects.exists()


def test_through_session_pooling_a_killed_run_leaves_no_lock_behind(pgbouncer):
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)
    PropertyObjectCardFactory(long_delisted=True, title="hold this batch")
    url = pgbouncer("session")

    with held_batch() as fault:
        job = purge_through(url, "--batch-size", "1", DELISTED_RETENTION_POOLER="session")
        fault.wait_until_held(job)
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=WAIT_SECONDS)
        # PgBouncer resets the server session of a client that went (DISCARD ALL releases advisory locks) once
        # its statement, held by the trigger, ends.
        fault.open_gate()
        wait_for(lambda: job_lock_holders() == [], what="the killed run's lock to go", timeout=10)

    next_run = purge_through(url, DELISTED_RETENTION_POOLER="session")
    stdout, stderr = next_run.communicate(timeout=WAIT_SECONDS)
    assert next_run.returncode == 0, stderr
    assert json.loads(stdout)["stop_reason"] == "completed"
    assert not PropertyObjectCard.objects.exists()

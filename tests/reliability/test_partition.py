"""The network between the job and PostgreSQL fails mid-run: a proxy of the tests' own (tests/freezing_proxy.py) stops
moving bytes and keeps every socket open, as a partition that drops packets does. Whatever the job was doing (a
batch, the pause, a COMMIT, the end count, connecting), it ends within its time limit plus 5 s (or 5 s after SIGTERM)
as `failed`, exit 1, with one error line saying so; it opens no other connection; the server ends the orphaned
session, and the advisory lock with it, within its bound; nothing is half done, and the next run completes.

The job runs with DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS=3, so that the server's bounds are seconds here. The
proxy's kernel acknowledges what the server sends, so the server's idle timeouts, not its keepalives, end the orphan
(the same bound on a real partition: docs/operations.md, "Known limits")."""

import json
import subprocess
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from catalog.models import PropertyObjectCard
from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import (
    HELD_TITLE, WAIT_SECONDS, CatalogState, finished, held_batch, job_backend_pids, job_lock_holders, one_error_line,
    run_purge, start_purge, stopped_within_bound, wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEAD_PEER_SECONDS = 3
# The server's bound for the orphan here: idle_in_transaction_session_timeout or idle_session_timeout (the pause
# plus DEAD_PEER_SECONDS) after the job's last statement, or the statement in flight's timeout; generous for load.
ORPHAN_SECONDS = 20
EXIT_SLACK = 5  # the process exits within its time limit plus this
BATCH_OF_OBJECTS = b"DELETE FROM catalog.property_object_cards"


def purge_through(proxy, *options: str) -> tuple[subprocess.Popen, float]:
    started = time.monotonic()
    job = start_purge("--json", *options, DATABASE_URL=proxy.url(),
                      DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS=str(DEAD_PEER_SECONDS))
    return job, started


def finished_after(job: subprocess.Popen, started: float) -> tuple[dict, str, float]:
    result, stderr = finished(job)
    return result, stderr, time.monotonic() - started



def assert_failed_on_the_lost_connection(job: subprocess.Popen, result: dict, stderr: str) -> None:
    assert job.returncode == 1, stderr
    assert (result["stop_reason"], result["outcome"], result["has_more"]) == ("failed", "failed", None), result
    assert one_error_line(stderr) == result["error"], stderr
    assert result["error"].startswith("the run lost its database connection"), result["error"]
    assert "frees the advisory lock with it, by " in result["error"]


def orphan_gone_within_its_bound(proxy) -> float:
    """Seconds from the freeze until the server has no session of the job and nobody holds its lock."""
    wait_for(lambda: not job_backend_pids() and not job_lock_holders(), what="the server to end the orphaned session",
             timeout=ORPHAN_SECONDS)
    return time.monotonic() - proxy.frozen_at


def overdue(count: int) -> list:
    long_ago = timezone.now() - timedelta(days=60)
    return [
        PropertyObjectCardFactory(long_delisted=True, updated_at=long_ago + timedelta(minutes=age),
                                  title=HELD_TITLE if age == 2 else f"flat {age}")
        for age in range(count)
    ]


def assert_the_next_run_completes() -> None:
    next_run = run_purge("--json")
    assert next_run.returncode == 0, next_run.stderr
    assert json.loads(next_run.stdout)["outcome"] == "completed"
    assert not PropertyObjectCard.objects.exists()


def test_a_partition_during_a_batch(freezing_proxy):
    cards = overdue(6)
    before = CatalogState.read()
    with held_batch() as fault:
        job, started = purge_through(freezing_proxy, "--batch-size", "2", "--max-duration-seconds", "3")
        fault.wait_until_held(job)  # batch 1 (cards 2-3) waits in its statement, on the server
        freezing_proxy.freeze()
        result, stderr, took = finished_after(job, started)
        gone = orphan_gone_within_its_bound(freezing_proxy)

    assert_failed_on_the_lost_connection(job, result, stderr)
    assert took < 3 + EXIT_SLACK, took
    assert (result["batches_processed"], result["uncertain_cards"]) == (1, 0)
    print(f"exit {took:.1f}s after the start, the orphan gone {gone:.1f}s after the freeze")
    after = CatalogState.read()
    after.assert_whole_batches_since(before)
    assert after.property_objects == {card.id for card in cards[2:]}
    assert_the_next_run_completes()


def test_a_partition_during_the_pause_between_batches(freezing_proxy):
    overdue(30)
    before = CatalogState.read()
    job, started = purge_through(freezing_proxy, "--batch-size", "10", "--batch-pause-ms", "1500",
                                 "--max-duration-seconds", "4")
    wait_for(lambda: PropertyObjectCard.objects.count() == 20, what="the first batch")
    freezing_proxy.freeze()
    result, stderr, took = finished_after(job, started)
    orphan_gone_within_its_bound(freezing_proxy)

    assert_failed_on_the_lost_connection(job, result, stderr)
    assert took < 4 + EXIT_SLACK, took
    CatalogState.read().assert_whole_batches_since(before)
    assert result["deleted_property_object_cards"] == 30 - PropertyObjectCard.objects.count()
    assert_the_next_run_completes()


def test_a_partition_during_a_commit_names_the_batch_whose_commit_is_unknown(freezing_proxy):
    overdue(30)
    before = CatalogState.read()
    freezing_proxy.freeze_before(b"COMMIT", after=BATCH_OF_OBJECTS)  # the first batch's COMMIT never arrives
    job, started = purge_through(freezing_proxy, "--batch-size", "10", "--max-duration-seconds", "3")
    result, stderr, took = finished_after(job, started)
    orphan_gone_within_its_bound(freezing_proxy)

    assert_failed_on_the_lost_connection(job, result, stderr)
    assert took < 3 + EXIT_SLACK, took
    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (0, 0)
    assert result["uncertain_cards"] == 10
    assert "batch 0 (property_objects, 10 cards) sent its COMMIT and got no answer" in result["error"]
    # It never reached the server here: the orphan's transaction rolled back whole.
    assert CatalogState.read() == before
    assert_the_next_run_completes()


def test_a_partition_during_the_end_count_leaves_has_more_unknown(freezing_proxy):
    overdue(30)
    freezing_proxy.freeze_before(b"WITH TIES", after=BATCH_OF_OBJECTS)  # the end count's first chunk
    job, started = purge_through(freezing_proxy, "--batch-size", "10", "--max-batches", "1",
                                 "--max-duration-seconds", "3")
    result, stderr, took = finished_after(job, started)
    orphan_gone_within_its_bound(freezing_proxy)

    assert_failed_on_the_lost_connection(job, result, stderr)  # has_more unknown: never "nothing left"
    assert took < 3 + EXIT_SLACK, took
    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (1, 10)
    assert_the_next_run_completes()


def test_a_partition_before_connecting_is_one_line_within_seconds(freezing_proxy):
    overdue(3)
    freezing_proxy.freeze()
    job, started = purge_through(freezing_proxy)
    stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
    took = time.monotonic() - started

    assert job.returncode == 1, stderr
    assert "database 'default' is unreachable" in one_error_line(stderr)
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert took < EXIT_SLACK + 2, took
    assert PropertyObjectCard.objects.count() == 3


def test_sigterm_during_a_partition_ends_the_process_within_5_s(freezing_proxy):
    overdue(30)
    # A pause of its own, longer than the bound: the signal, not the pause's end, ends the run.
    job, _ = purge_through(freezing_proxy, "--batch-size", "10", "--batch-pause-ms", "6000")
    wait_for(lambda: PropertyObjectCard.objects.count() == 20, what="the first batch")
    freezing_proxy.freeze()

    result, stderr = stopped_within_bound(job)

    assert_failed_on_the_lost_connection(job, result, stderr)
    orphan_gone_within_its_bound(freezing_proxy)
    assert_the_next_run_completes()

"""The network between the job and PostgreSQL fails mid-run: a proxy of the tests' own (tests/freezing_proxy.py) drops
every packet both ways, as a partition does (no byte, no ACK, no FIN, no RST). Whatever the job was doing (a batch,
the pause, a COMMIT, a culprit isolation's COMMIT, the end count), it ends `failed` within the dead-peer timeout plus
EXIT_SLACK of the partition, exit 1, with one error line saying so; it opens no other connection; the server ends the
orphaned session, and the advisory lock with it, by the time that line gives; nothing is half done, and the next run
completes. A partition before connecting is one line within the connect timeout. A first SIGTERM does not end the
wait for a dead peer (the run ends as above); a second ends the process at once.

The job runs with DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS=3, so that both ends' keepalives and user timeouts
give up within seconds here (30 s by default: docs/operations.md)."""

import signal
import subprocess
import time
from datetime import datetime

import pytest
from django.utils import timezone

from catalog.models import PropertyObjectCard
from tests.reliability.support import (
    EXIT_SECONDS, WAIT_SECONDS, CatalogState, assert_the_next_run_completes, ended_by_a_second_signal, finished,
    held_batch, job_backend_pids, job_lock_holders, one_error_line, overdue_cards, start_purge, wait_for,
)
from tests.support import deletes_refused

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DEAD_PEER_SECONDS = 3
EXIT_SLACK = 5  # the process exits within the dead-peer timeout plus this of the partition
BATCH_OF_OBJECTS = b"DELETE FROM catalog.property_object_cards"
FREE_BY = "frees the advisory lock with it, by "


def purge_through(proxy, *options: str) -> subprocess.Popen:
    return start_purge("--json", *options, DATABASE_URL=proxy.url(),
                       DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS=str(DEAD_PEER_SECONDS))


def failed_on_the_lost_connection(job: subprocess.Popen, proxy) -> dict:
    """The job's result once it exits: failed on the lost connection, in one line, within its bound of the
    partition."""
    result, stderr = finished(job)
    took = time.monotonic() - proxy.frozen_at
    print(f"exit {job.returncode} {took:.1f}s after the partition: {result['error']}")
    assert job.returncode == 1, stderr
    assert took < DEAD_PEER_SECONDS + EXIT_SLACK, took
    assert (result["stop_reason"], result["outcome"], result["has_more"]) == ("failed", "failed", None), result
    assert one_error_line(stderr) == result["error"], stderr
    assert result["error"].startswith("the run lost its database connection"), result["error"]
    assert "it opened no other" in result["error"] and FREE_BY in result["error"], result["error"]
    return result


def orphan_gone_by_the_time_said(result: dict, proxy) -> None:
    """The server has no session of the job and nobody holds its lock by the time the error line gives (a second
    more: it is given to the second). Not shown through a Unix socket (the embedded server), where no packet of the
    server's side can be dropped: there the orphan goes by its idle timeouts (orphan_gone)."""
    if not proxy.partitions_the_server:
        return
    free_by = datetime.fromisoformat(result["error"].partition(FREE_BY)[2].split()[0])
    left = (free_by - timezone.now()).total_seconds() + 1
    wait_for(lambda: not job_backend_pids() and not job_lock_holders(), what="the server to end the orphaned session",
             timeout=max(left, 0.1))
    print(f"the orphan gone {time.monotonic() - proxy.frozen_at:.1f}s after the partition")


def orphan_gone() -> None:
    """The orphan gone at all, before the next run: by the server's own bounds, whatever its side of the proxy."""
    wait_for(lambda: not job_backend_pids() and not job_lock_holders(), what="the orphan to go")


def test_a_partition_during_a_batch(freezing_proxy):
    cards = overdue_cards(6, held=2)
    before = CatalogState.read()
    with held_batch() as fault:
        job = purge_through(freezing_proxy, "--batch-size", "2")
        fault.wait_until_held(job)  # batch 1 (cards 2-3) waits in its statement, on the server
        freezing_proxy.freeze()
        result = failed_on_the_lost_connection(job, freezing_proxy)
        orphan_gone_by_the_time_said(result, freezing_proxy)  # while its batch is still held
    orphan_gone()

    assert (result["batches_processed"], result["uncertain_cards"]) == (1, 0)
    after = CatalogState.read()
    after.assert_whole_batches_since(before)
    assert after.property_objects == {card.id for card in cards[2:]}
    assert_the_next_run_completes()


def test_a_partition_during_the_pause_between_batches(freezing_proxy):
    overdue_cards(30)
    before = CatalogState.read()
    job = purge_through(freezing_proxy, "--batch-size", "10", "--batch-pause-ms", "1500")
    wait_for(lambda: PropertyObjectCard.objects.count() == 20, what="the first batch")
    freezing_proxy.freeze()
    result = failed_on_the_lost_connection(job, freezing_proxy)
    orphan_gone_by_the_time_said(result, freezing_proxy)

    CatalogState.read().assert_whole_batches_since(before)
    assert result["deleted_property_object_cards"] == 30 - PropertyObjectCard.objects.count()
    assert_the_next_run_completes()


def test_a_partition_at_a_commit_names_the_batch_whose_commit_is_unknown(freezing_proxy):
    overdue_cards(30)
    before = CatalogState.read()
    freezing_proxy.freeze_before(b"COMMIT", after=BATCH_OF_OBJECTS)  # the first batch's COMMIT never arrives
    job = purge_through(freezing_proxy, "--batch-size", "10")
    result = failed_on_the_lost_connection(job, freezing_proxy)
    orphan_gone_by_the_time_said(result, freezing_proxy)

    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (0, 0)
    assert result["uncertain_cards"] == 10
    assert "; batch 0 (property_objects, 10 cards) sent its COMMIT and got no answer" in result["error"]
    # It never reached the server here: the orphan's transaction rolled back whole.
    assert CatalogState.read() == before
    assert_the_next_run_completes()


def test_a_partition_at_the_commit_of_a_culprit_isolation_names_its_batch_as_a_plain_one(freezing_proxy):
    overdue_cards(10, poison=4)
    before = CatalogState.read()
    # The batch is refused and redone in parts, each under a savepoint, in one transaction: its COMMIT never arrives.
    freezing_proxy.freeze_before(b"COMMIT", after=b"SAVEPOINT")
    with deletes_refused(when="OLD.title = 'poison'"):
        job = purge_through(freezing_proxy, "--batch-size", "10")
        result = failed_on_the_lost_connection(job, freezing_proxy)
        orphan_gone_by_the_time_said(result, freezing_proxy)

    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (0, 0)
    assert (result["culprit_count"], result["uncertain_cards"]) == (1, 9)
    assert "; batch 0 (property_objects, 9 cards) sent its COMMIT and got no answer" in result["error"]
    assert CatalogState.read() == before
    assert_the_next_run_completes()


def test_a_partition_during_the_end_count_leaves_has_more_unknown(freezing_proxy):
    overdue_cards(30)
    freezing_proxy.freeze_before(b"WITH TIES", after=BATCH_OF_OBJECTS)  # the end count's first chunk
    job = purge_through(freezing_proxy, "--batch-size", "10", "--max-batches", "1")
    result = failed_on_the_lost_connection(job, freezing_proxy)  # has_more unknown: never "nothing left"
    orphan_gone_by_the_time_said(result, freezing_proxy)

    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (1, 10)
    assert_the_next_run_completes()


def test_a_partition_before_connecting_is_one_line_within_the_url_s_connect_timeout(freezing_proxy):
    overdue_cards(3)
    freezing_proxy.freeze()
    started = time.monotonic()
    job = start_purge(DATABASE_URL=freezing_proxy.url("connect_timeout=2"))  # the URL's own timeout wins
    _, stderr = job.communicate(timeout=WAIT_SECONDS)
    took = time.monotonic() - started

    assert job.returncode == 1, stderr
    assert "database 'default' is unreachable" in one_error_line(stderr)
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert 2 <= took < 2 + EXIT_SLACK, took
    assert PropertyObjectCard.objects.count() == 3


def test_a_first_sigterm_during_a_partition_leaves_the_run_to_fail_on_its_dead_peer(freezing_proxy):
    overdue_cards(30)
    before = CatalogState.read()
    # A pause of its own, longer than the bound: the signal ends it, and the end count meets the partition.
    job = purge_through(freezing_proxy, "--batch-size", "10", "--batch-pause-ms", "20000")
    wait_for(lambda: PropertyObjectCard.objects.count() == 20, what="the first batch")
    freezing_proxy.freeze()
    job.send_signal(signal.SIGTERM)

    result = failed_on_the_lost_connection(job, freezing_proxy)
    orphan_gone_by_the_time_said(result, freezing_proxy)
    orphan_gone()
    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (1, 10)
    CatalogState.read().assert_whole_batches_since(before)
    assert_the_next_run_completes()


def test_a_second_sigterm_during_a_partition_ends_the_process_at_once(freezing_proxy):
    cards = overdue_cards(6, held=2)
    before = CatalogState.read()
    with held_batch() as fault:
        job = purge_through(freezing_proxy, "--batch-size", "2")
        fault.wait_until_held(job)
        freezing_proxy.freeze()
        ended_by_a_second_signal(job, signal.SIGTERM)
        assert time.monotonic() - freezing_proxy.frozen_at < EXIT_SECONDS + 1  # the gap between the signals
        # The server has no client to tell: its keepalives find the dead peer, as after a partition alone (through a
        # Unix socket, once the batch is no longer held: its idle timeouts).
        if freezing_proxy.partitions_the_server:
            orphan_gone()
            print(f"the orphan gone {time.monotonic() - freezing_proxy.frozen_at:.1f}s after the partition")
    orphan_gone()

    after = CatalogState.read()
    after.assert_whole_batches_since(before)
    assert after.property_objects == {card.id for card in cards[2:]}
    assert_the_next_run_completes()

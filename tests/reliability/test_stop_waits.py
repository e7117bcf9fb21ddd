"""Waits of the job that a SIGTERM must end within STOP_SECONDS (tests/reliability/support.py), besides those other
tests cover: the connection to a database server that never answers, the count at the end of a run that a
migration's table lock holds up after the signal, and the metrics export to a Pushgateway that never answers, alone
and with a trace collector that never answers either; and the run's deadline ending a count that such a lock holds
up. Each is seen from outside: the process, its exit status and its `--json` result.

Covered elsewhere: the start count and the dry run's preview behind a lock, the pause between batches
(test_stop_cancels.py), a COMMIT waiting for a gone synchronous standby (test_synchronous_commit.py), the wait for a
lagging standby (test_replica_lag.py), a statement waiting for a saturated pool's server (test_pooler_detection.py),
a culprit isolation (test_stop_isolation.py)."""

import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import (
    HELD_TITLE, STOP_SECONDS, WAIT_SECONDS, held_batch, query, run_purge, start_purge, stopped_within_bound,
    wait_for,
)
from tests.support import database_url_of_tests
from tests.tracing.receiver import running_receiver

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# An operator's longer lock timeout, within its range: the stop, not the timeout, must end a wait.
LONG_LOCK_TIMEOUT = {"DELISTED_RETENTION_LOCK_TIMEOUT_MS": "60000"}


@contextmanager
def silent_server() -> Iterator[socket.socket]:
    """A loopback port whose kernel accepts connections and where nothing ever answers."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


def first_client(server: socket.socket) -> socket.socket:
    """The first connection to `server`, accepted and left unanswered: the job is now waiting for an answer."""
    server.settimeout(WAIT_SECONDS)
    client, _ = server.accept()
    return client


@contextmanager
def table_lock_queued(sql: str) -> Iterator[int]:
    """A migration's `LOCK TABLE ...` on its own connection, queued behind whatever holds the table, held once granted
    until the block ends. Yields its backend pid."""
    migration = psycopg.connect(database_url_of_tests())
    worker = threading.Thread(target=migration.execute, args=(sql,), daemon=True)
    worker.start()
    try:
        yield migration.info.backend_pid
    finally:
        if worker.is_alive():
            migration.cancel_safe()
        worker.join(timeout=WAIT_SECONDS)
        migration.close()


def waits_for_a_lock(pid: int) -> bool:
    return bool(query("SELECT 1 FROM pg_stat_activity WHERE pid = %s AND wait_event_type = 'Lock'", [pid]))


def test_sigterm_while_connecting_to_a_server_that_never_answers_ends_the_run_stopped():
    with silent_server() as server:
        job = start_purge("--json", DATABASE_URL=f"postgres://postgres@127.0.0.1:{server.getsockname()[1]}/catalog")
        with first_client(server):
            result, stderr = stopped_within_bound(job)

    assert job.returncode == 0, stderr
    assert result["stop_reason"] == "stopped"


def test_sigterm_during_a_batch_then_a_migration_lock_on_the_cards_does_not_hold_up_the_end_of_the_run():
    """A deploy sends SIGTERM and a migration queues for the cards table behind the job's batch: the batch, cancelled,
    lets the migration in, and whatever the job still reads of that table after the signal must not wait for it."""
    PropertyObjectCardFactory(long_delisted=True, title=HELD_TITLE)
    with held_batch() as fault:
        job = start_purge("--json", **LONG_LOCK_TIMEOUT)
        fault.wait_until_held(job)
        with table_lock_queued("LOCK TABLE catalog.property_object_cards IN ACCESS EXCLUSIVE MODE") as migration:
            wait_for(lambda: waits_for_a_lock(migration), what="the migration's lock to queue behind the batch")
            try:
                result, stderr = stopped_within_bound(job)
            finally:
                if job.poll() is None:
                    job.kill()
                    job.communicate()

    assert job.returncode == 0, stderr
    assert (result["stop_reason"], result["deleted_property_object_cards"]) == ("stopped", 0)


def test_sigterm_while_the_metrics_export_waits_for_a_pushgateway_that_never_answers_ends_the_run_at_once():
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    with silent_server() as gateway:
        job = start_purge("--json", PROMETHEUS_PUSHGATEWAY_URL=f"http://127.0.0.1:{gateway.getsockname()[1]}")
        with first_client(gateway):  # the export at the start of the run
            result, stderr = stopped_within_bound(job)

    assert job.returncode == 0, stderr
    assert result["stop_reason"] == "stopped"


def test_sigterm_with_a_silent_pushgateway_and_a_collector_that_never_answers_still_exits_within_the_bound():
    """Both waits at the end of a process at once: the metrics export takes its bound, and the trace flush at exit,
    which alone may wait 3 s, gets only what is left of the stop's bound."""
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    with silent_server() as gateway, running_receiver(answer=None) as collector:
        job = start_purge("--json", PROMETHEUS_PUSHGATEWAY_URL=f"http://127.0.0.1:{gateway.getsockname()[1]}",
                          **collector.env())
        with first_client(gateway):
            result, stderr = stopped_within_bound(job)

    assert job.returncode == 0, stderr
    assert result["stop_reason"] == "stopped"
    assert collector.requests >= 1 and "tracing: spans not delivered" in stderr, stderr


def test_the_deadline_ends_a_count_waiting_for_a_migration_lock_as_a_run_stopped_by_its_time():
    """The run's deadline reaches a read the way a stop request does: a start count queued behind a migration's table
    lock (with a lock timeout longer than the run) ends when the run's time is up, not at the lock timeout."""
    PropertyObjectCardFactory(long_delisted=True)
    with psycopg.connect(database_url_of_tests()) as migration:
        migration.execute("LOCK TABLE catalog.property_object_cards IN ACCESS EXCLUSIVE MODE")
        started = time.monotonic()
        job = run_purge("--json", "--max-duration-seconds", "2", **LONG_LOCK_TIMEOUT)
        took = time.monotonic() - started
        migration.rollback()

    assert job.returncode == 0, job.stderr
    result = json.loads(job.stdout)
    assert (result["stop_reason"], result["batches_processed"]) == ("max_duration", 0)
    assert (result["has_more"], result["outcome"]) == (None, "has_more")  # unknown is never "nothing left"
    assert took < 2 + STOP_SECONDS, took

"""What a first SIGTERM leaves to its end, a second one ends at once: whatever the process waits on (a batch held in
the database, a statement behind a table lock, a metrics export to a Pushgateway that never answers, a connect to a
server that never answers; a partition: test_partition.py), a second SIGTERM or SIGINT ends it within EXIT_SECONDS,
with exit status 128 + the signal's number and one error line. The server then rolls back the batch in flight and
frees the advisory lock as the connection closes: nothing is done, and the lock is free again within seconds
(each test prints how soon). And the run's deadline, like a stop, is checked before each batch: a batch that outlasts
it runs to its end, and the run ends right after it."""

import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from tests.reliability.support import (
    WAIT_SECONDS, CatalogState, ended_by_a_second_signal, held_batch, job_backend_pids, overdue_cards, query,
    seconds_until_the_lock_is_free, start_purge, wait_for,
)
from tests.support import database_url_of_tests

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# An operator's longer lock timeout, within its range: the signal, not the timeout, must end a wait.
LONG_LOCK_TIMEOUT = {"DELISTED_RETENTION_LOCK_TIMEOUT_MS": "60000"}
SIGNALS = pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])


def assert_ended_at_once(job, signum: signal.Signals) -> None:
    """The second signal ended the process at once, and the server let go of its session and lock soon after."""
    ended_by_a_second_signal(job, signum)
    print(f"the lock free {seconds_until_the_lock_is_free():.2f}s after the exit")


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


def waiting_on_a_lock() -> bool:
    return bool(job_backend_pids()) and bool(query(
        "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s) AND wait_event_type = 'Lock'", [job_backend_pids()]
    ))


@SIGNALS
def test_a_second_signal_while_a_batch_is_held_ends_the_process_at_once_and_the_batch_rolls_back(signum):
    cards = overdue_cards(6, held=2, overrides=2)
    before = CatalogState.read()
    with held_batch() as fault:
        job = start_purge("--json", "--batch-size", "2")
        fault.wait_until_held(job)  # batch 1 (cards 2 and 3), after batch 0 committed
        assert_ended_at_once(job, signum)
    after = CatalogState.read()
    after.assert_whole_batches_since(before)
    assert after.property_objects == {card.id for card in cards[2:]}  # batch 1 rolled back whole


@pytest.mark.parametrize("options", [(), ("--dry-run",)], ids=["start count", "dry-run preview"])
def test_a_second_sigterm_ends_a_statement_waiting_behind_a_table_lock_at_once(options):
    overdue_cards(2, overrides=2)
    before = CatalogState.read()
    with psycopg.connect(database_url_of_tests()) as migration:  # its transaction stays open in the block
        migration.execute("LOCK TABLE catalog.property_object_cards IN ACCESS EXCLUSIVE MODE")
        job = start_purge("--json", *options, **LONG_LOCK_TIMEOUT)
        wait_for(waiting_on_a_lock, what="the job to wait behind the table lock")
        assert_ended_at_once(job, signal.SIGTERM)  # while the table lock is still held
    assert CatalogState.read() == before


def test_a_second_sigterm_ends_a_metrics_export_to_a_pushgateway_that_never_answers_at_once():
    overdue_cards(3, overrides=2)
    before = CatalogState.read()
    with silent_server() as gateway:
        job = start_purge("--json", PROMETHEUS_PUSHGATEWAY_URL=f"http://127.0.0.1:{gateway.getsockname()[1]}")
        with first_client(gateway):  # the export at the start of the run, bound to 2 s
            assert_ended_at_once(job, signal.SIGTERM)
    assert CatalogState.read() == before


def test_a_second_sigterm_ends_a_connect_to_a_server_that_never_answers_at_once():
    with silent_server() as server:
        job = start_purge("--json", DATABASE_URL=f"postgres://postgres@127.0.0.1:{server.getsockname()[1]}/catalog")
        with first_client(server):  # the connect waits up to its 10 s timeout
            ended_by_a_second_signal(job, signal.SIGTERM)


def test_a_batch_that_outlasts_the_run_s_deadline_runs_to_its_end_and_the_run_ends_right_after_it():
    cards = overdue_cards(6, held=0, overrides=2)
    before = CatalogState.read()
    with held_batch() as fault:
        job = start_purge("--json", "--batch-size", "2", "--max-duration-seconds", "2")
        fault.wait_until_held(job)
        time.sleep(2.2)  # past the deadline, which came after the run started, before its batch was held
        assert job.poll() is None, "the deadline cut the batch in flight"
        result = fault.release(job)

    assert (result["stop_reason"], result["outcome"], result["has_more"]) == ("max_duration", "has_more", True)
    assert (result["batches_processed"], result["deleted_property_object_cards"]) == (1, 2)
    after = CatalogState.read()
    after.assert_whole_batches_since(before)
    assert after.property_objects == {card.id for card in cards[2:]}

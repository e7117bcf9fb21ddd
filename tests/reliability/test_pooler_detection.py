"""Pooler detection that does not depend on luck, on a real PgBouncer: a pooler is refused before anything is
locked, however busy the pool. A saturated pool holds the job's first statement until PgBouncer's own
query_wait_timeout, and the run is then refused as behind any pooler; a first SIGTERM leaves that wait to its end, a
second ends the process at once."""

import json
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from catalog.models import PropertyObjectCard
from retention.locks import POOLED
from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import (
    WAIT_SECONDS, ended_by_a_second_signal, job_lock_holders, one_error_line, wait_for,
)
from tests.reliability.test_pgbouncer import purge_through
from tests.servers import pgbouncer_clients_waiting

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
TRIALS = 20
POOL_SIZE = 5


@contextmanager
def busy_clients(url: str, count: int) -> Iterator[None]:
    """`count` other clients running short transactions through the pool without pause, after every server of the
    pool was opened (warm): the job's transactions and a probe of its own land on whichever server is free."""
    warm = [psycopg.connect(url) for _ in range(POOL_SIZE)]
    for client in warm:
        client.execute("SELECT 1")  # each in an open transaction: POOL_SIZE servers at once
    for client in warm:
        client.close()
    done = threading.Event()

    def keep_busy() -> None:
        # No prepared statements: the next transaction may run on another server.
        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as client:
            while not done.is_set():
                client.execute("SELECT pg_sleep(0.01)")

    clients = [threading.Thread(target=keep_busy) for _ in range(count)]
    for client in clients:
        client.start()
    try:
        yield
    finally:
        done.set()
        for client in clients:
            client.join()


def test_a_busy_transaction_pool_is_refused_in_every_trial_deleting_nothing_and_leaving_no_lock(pgbouncer):
    PropertyObjectCardFactory.create_batch(50, long_delisted=True)
    url = pgbouncer("transaction", default_pool_size=POOL_SIZE, server_round_robin=1)
    with busy_clients(url, 4):
        for _ in range(TRIALS):
            job = purge_through(url, "--batch-size", "5")
            stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
            assert job.returncode == 1, stderr
            assert one_error_line(stderr) == POOLED.format(alias="default")
            assert PropertyObjectCard.objects.count() == 50
            assert job_lock_holders() == []


def saturated_session_pool(pgbouncer, *, query_wait_timeout: int) -> tuple[str, list[psycopg.Connection]]:
    """A session pool of two servers, each held by a client for its whole session: a new client waits for one until
    PgBouncer's query_wait_timeout (seconds)."""
    url = pgbouncer("session", default_pool_size=2, query_wait_timeout=query_wait_timeout)
    holders = [psycopg.connect(url, autocommit=True) for _ in range(2)]
    for holder in holders:
        holder.execute("SELECT 1")
    return url, holders


def test_a_saturated_session_pool_holds_the_run_until_its_query_wait_timeout_then_it_is_refused(pgbouncer):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    url, holders = saturated_session_pool(pgbouncer, query_wait_timeout=2)
    try:
        started = time.monotonic()
        job = purge_through(url)
        stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
        took = time.monotonic() - started
    finally:
        for holder in holders:
            holder.close()

    assert job.returncode == 1, stderr
    assert one_error_line(stderr) == POOLED.format(alias="default")
    assert json.loads(stdout)["error"] == POOLED.format(alias="default")
    assert 2 <= took < 2 + 5, took  # PgBouncer's wait, a process start-up
    assert PropertyObjectCard.objects.count() == 3


def test_a_first_sigterm_does_not_end_the_wait_for_a_saturated_pool_a_second_does(pgbouncer):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    url, holders = saturated_session_pool(pgbouncer, query_wait_timeout=60)
    try:
        job = purge_through(url)
        wait_for(lambda: pgbouncer_clients_waiting(url), what="the job waiting for a server of the pool")
        job.send_signal(signal.SIGTERM)
        time.sleep(1)
        assert job.poll() is None, "a first SIGTERM ended the wait"
        ended_by_a_second_signal(job, signal.SIGTERM)
    finally:
        for holder in holders:
            holder.close()
    assert PropertyObjectCard.objects.count() == 3

"""Pooler detection that does not depend on luck, on a real PgBouncer: a pooler is refused before anything is
locked, however busy the pool; the wait for a saturated pool's server obeys the run's time and SIGTERM."""

import json
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest

from catalog.models import PropertyObjectCard
from retention.locks import POOL_SATURATED, POOLED
from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import WAIT_SECONDS, job_lock_holders, one_error_line, wait_for
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


def saturated_session_pool(pgbouncer):
    url = pgbouncer("session", default_pool_size=2, query_wait_timeout=0)
    holders = [psycopg.connect(url, autocommit=True) for _ in range(2)]
    for holder in holders:
        holder.execute("SELECT 1")  # each holds one of the pool's two servers for its whole session
    return url, holders


def test_a_saturated_session_pool_ends_the_run_as_one_line_within_its_time(pgbouncer):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    url, holders = saturated_session_pool(pgbouncer)
    try:
        job = purge_through(url, "--max-duration-seconds", "3")
        stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
    finally:
        for holder in holders:
            holder.close()
    assert job.returncode == 1, stderr
    assert one_error_line(stderr) == POOL_SATURATED.format(alias="default")
    assert PropertyObjectCard.objects.count() == 3


def test_a_saturated_session_pool_obeys_sigterm(pgbouncer):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    url, holders = saturated_session_pool(pgbouncer)
    try:
        job = purge_through(url)
        wait_for(lambda: pgbouncer_clients_waiting(url), what="the job waiting for a server of the pool")
        job.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
        assert time.monotonic() - signalled < 5
    finally:
        for holder in holders:
            holder.close()
    assert job.returncode == 0, stderr
    assert json.loads(stdout)["stop_reason"] == "stopped"
    assert PropertyObjectCard.objects.count() == 3

"""The real PgBouncer of tests/servers.py shows the behaviour the job must cope with: transaction pooling hands a
client's session advisory lock to whichever client next runs on that server connection, and moves a client to
another backend between its transactions; session pooling keeps one backend per client and resets it (DISCARD
ALL) when the client goes, even killed, so its lock goes with it."""

import signal
import subprocess
import sys

import psycopg
import pytest

from retention.locks import advisory_lock_key
from tests.support import advisory_lock_holders
from tests.reliability.support import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

KEY = advisory_lock_key("test:pgbouncer-fixture")
TAKE_LOCK = "SELECT pg_try_advisory_lock(%s)"
BACKEND = "SELECT pg_backend_pid()"
HOLD_THE_LOCK_AND_WAIT = """
import sys, time
import psycopg
client = psycopg.connect(sys.argv[1], autocommit=True)
print(client.execute("SELECT pg_try_advisory_lock(%s)", [int(sys.argv[2])]).fetchone()[0], flush=True)
time.sleep(60)
"""


def value(client: psycopg.Connection, sql: str, params: list | None = None):
    return client.execute(sql, params).fetchone()[0]


def test_transaction_pooling_lets_a_second_client_take_the_lock_of_the_first(pgbouncer):
    url = pgbouncer("transaction")
    with psycopg.connect(url, autocommit=True) as first, psycopg.connect(url, autocommit=True) as second:
        assert value(first, TAKE_LOCK, [KEY]) is True
        # The idle server connection that holds the lock serves the second client's statement.
        assert value(second, TAKE_LOCK, [KEY]) is True
        assert len(advisory_lock_holders(KEY)) == 1


def test_transaction_pooling_moves_a_client_off_the_backend_that_holds_its_lock(pgbouncer):
    url = pgbouncer("transaction")
    with psycopg.connect(url, autocommit=True) as first, psycopg.connect(url) as second:
        assert value(first, TAKE_LOCK, [KEY]) is True
        [holder] = advisory_lock_holders(KEY)
        # The second client's open transaction keeps the only server connection, the lock holder, to itself.
        assert value(second, BACKEND) == holder

        assert value(first, BACKEND) != holder


def test_session_pooling_keeps_one_backend_per_client(pgbouncer):
    url = pgbouncer("session")
    with psycopg.connect(url, autocommit=True) as first, psycopg.connect(url, autocommit=True) as second:
        assert value(first, TAKE_LOCK, [KEY]) is True
        [holder] = advisory_lock_holders(KEY)

        assert value(second, TAKE_LOCK, [KEY]) is False
        assert value(first, BACKEND) == holder


def test_session_pooling_releases_the_lock_of_a_killed_client(pgbouncer):
    url = pgbouncer("session")
    client = subprocess.Popen(
        [sys.executable, "-c", HOLD_THE_LOCK_AND_WAIT, url, str(KEY)], stdout=subprocess.PIPE, text=True,
    )
    try:
        assert client.stdout.readline().strip() == "True"
        assert advisory_lock_holders(KEY)
    finally:
        client.send_signal(signal.SIGKILL)
        client.wait()

    wait_for(lambda: not advisory_lock_holders(KEY), what="the killed client's lock to be released")
    with psycopg.connect(url, autocommit=True) as next_client:
        assert value(next_client, TAKE_LOCK, [KEY]) is True

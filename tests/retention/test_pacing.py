"""Replica-lag pacing against a real streaming standby (tests/servers.py), its replay paused with
pg_wal_replay_pause() while the primary keeps writing WAL."""

import threading
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from retention.pacing import ReplicaLagHidden, replica_lag, wait_for_replicas
from retention.session import Session, StopRequest
from tests.reliability.support import wait_for
from tests.support import job_session
from tests.servers import Replica, database_alias

pytestmark = pytest.mark.slow

MAX_LAG = timedelta(milliseconds=300)
BOUNDED_WAIT = timedelta(seconds=30)


@pytest.fixture
def primary(replica: Replica, django_db_blocker) -> Iterator[str]:
    with django_db_blocker.unblock(), database_alias("primary", replica.primary_url) as alias:
        yield alias


@pytest.fixture
def paused_replay(replica: Replica) -> Iterator[None]:
    replica.pause_replay()
    try:
        yield
    finally:
        replica.resume_replay()


def lag_beyond_max_lag(replica: Replica, primary: str) -> timedelta:
    """Write WAL on the primary until the paused standby lags more than MAX_LAG; that lag."""
    with psycopg.connect(replica.primary_url, autocommit=True) as writer:
        writer.execute("CREATE TABLE IF NOT EXISTS wal_filler (written_at timestamptz DEFAULT now())")

        def lag_once_written() -> timedelta | None:
            writer.execute("INSERT INTO wal_filler DEFAULT VALUES")
            lag = replica_lag(Session(primary))
            return lag if lag > MAX_LAG else None

        return wait_for(lag_once_written, what=f"the paused standby to lag more than {MAX_LAG}")


@pytest.mark.django_db
def test_without_a_standby_there_is_no_lag_and_no_wait():
    assert replica_lag(Session()) is None

    wait = wait_for_replicas(job_session(), max_lag=timedelta(0), max_wait=BOUNDED_WAIT)

    assert (wait.caught_up, wait.last_lag) == (True, None)


def test_a_standby_replaying_along_is_within_the_limit(primary):
    wait = wait_for_replicas(job_session(using=primary), max_lag=timedelta(seconds=5), max_wait=BOUNDED_WAIT)

    assert wait.caught_up
    assert wait.last_lag is not None


def test_a_paused_standby_lags_more_and_more_and_the_wait_runs_out(replica, primary, paused_replay):
    lag_before = lag_beyond_max_lag(replica, primary)

    wait = wait_for_replicas(job_session(using=primary), max_lag=MAX_LAG, max_wait=timedelta(seconds=1))

    assert not wait.caught_up
    assert wait.waited >= timedelta(seconds=1)
    assert wait.last_lag > lag_before  # it grows with no WAL written meanwhile, not frozen at the last reply


def test_the_wait_ends_caught_up_once_replay_resumes(replica, primary, paused_replay):
    lag_beyond_max_lag(replica, primary)
    replica.resume_replay()

    wait = wait_for_replicas(job_session(using=primary), max_lag=MAX_LAG, max_wait=BOUNDED_WAIT)

    assert wait.caught_up
    assert wait.last_lag <= MAX_LAG


def test_a_stop_request_ends_the_wait(replica, primary, paused_replay):
    lag_beyond_max_lag(replica, primary)
    stop = StopRequest()
    threading.Timer(0.5, stop.request).start()

    with job_session(using=primary, stop=stop).running() as session:
        wait = wait_for_replicas(session, max_lag=MAX_LAG, max_wait=BOUNDED_WAIT)

    assert not wait.caught_up
    assert wait.waited < timedelta(seconds=5)
    assert wait.last_lag > MAX_LAG


def test_a_role_that_cannot_see_the_standbys_is_refused_not_told_there_is_no_lag(replica, django_db_blocker):
    with psycopg.connect(replica.primary_url, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS no_stats; CREATE ROLE no_stats LOGIN")
    unprivileged_url = replica.primary_url.replace("postgres@", "no_stats@")

    with django_db_blocker.unblock(), database_alias("unprivileged", unprivileged_url) as alias:
        with pytest.raises(ReplicaLagHidden):
            replica_lag(Session(alias))

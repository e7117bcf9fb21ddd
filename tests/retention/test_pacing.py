"""Replica-lag pacing against a real streaming standby (tests/servers.py), its replay paused with
pg_wal_replay_pause() while the primary keeps writing WAL."""

import threading
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest

from retention.pacing import ReplicaLagHidden, replica_lag, wait_for_replicas
from retention.results import Run
from retention.session import JobSession, Session, StopRequest
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


def wait_for_replicas_of(session: JobSession) -> Run:
    """The run's wait for the standbys before a batch, on `session`'s limits, caught up; the run, with the time it
    waited."""
    run = Run(session.run_id)
    assert wait_for_replicas(session, run)
    return run


@pytest.mark.django_db
def test_without_a_standby_there_is_no_lag_and_no_wait():
    assert replica_lag(Session()) is None

    run = wait_for_replicas_of(job_session(max_replica_lag=MAX_LAG, replica_lag_wait=BOUNDED_WAIT))

    assert run.replica_lag_wait < 0.5


def test_a_standby_replaying_along_is_within_the_limit(primary):
    assert replica_lag(Session(primary)) is not None

    run = wait_for_replicas_of(job_session(using=primary, max_replica_lag=timedelta(seconds=5),
                                           replica_lag_wait=BOUNDED_WAIT))

    assert run.replica_lag_wait < 0.5


def test_a_paused_standby_lags_more_and_more_and_the_wait_runs_out(replica, primary, paused_replay):
    lag_before = lag_beyond_max_lag(replica, primary)
    session = job_session(using=primary, max_replica_lag=MAX_LAG, replica_lag_wait=timedelta(seconds=1))
    run = Run(session.run_id)

    assert not wait_for_replicas(session, run)  # the run then stops with replica_lag

    assert run.replica_lag_wait >= 1 and not session.stop.requested
    assert replica_lag(Session(primary)) > lag_before  # it grows with no WAL written meanwhile, not frozen at a reply


def test_the_wait_ends_caught_up_once_replay_resumes(replica, primary, paused_replay):
    lag_beyond_max_lag(replica, primary)
    replica.resume_replay()

    wait_for_replicas_of(job_session(using=primary, max_replica_lag=MAX_LAG, replica_lag_wait=BOUNDED_WAIT))

    assert replica_lag(Session(primary)) <= MAX_LAG


def test_a_stop_request_ends_the_wait(replica, primary, paused_replay):
    lag_beyond_max_lag(replica, primary)
    stop = StopRequest()
    threading.Timer(0.5, stop.request).start()
    session = job_session(using=primary, stop=stop, max_replica_lag=MAX_LAG, replica_lag_wait=BOUNDED_WAIT)
    run = Run(session.run_id)

    with session:
        assert not wait_for_replicas(session, run)  # the run's next check then says: stopped

    assert 0.4 < run.replica_lag_wait < 5
    assert replica_lag(Session(primary)) > MAX_LAG


def test_a_role_that_cannot_see_the_standbys_is_refused_not_told_there_is_no_lag(replica, django_db_blocker):
    with psycopg.connect(replica.primary_url, autocommit=True) as admin:
        admin.execute("DROP ROLE IF EXISTS no_stats; CREATE ROLE no_stats LOGIN")
    unprivileged_url = replica.primary_url.replace("postgres@", "no_stats@")

    with django_db_blocker.unblock(), database_alias("unprivileged", unprivileged_url) as alias:
        with pytest.raises(ReplicaLagHidden):
            replica_lag(Session(alias))

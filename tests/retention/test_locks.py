import pytest
from django.db import connection

from retention.locks import PooledSessionError, advisory_lock, advisory_lock_key, prove_holder
from retention.service import LOCK_NAME
from tests.support import advisory_lock_holders, job_lock_held_elsewhere, job_session

pytestmark = pytest.mark.django_db

# Documented in docs/operations.md: operators look for this key in pg_locks.
JOB_LOCK_KEY = 3155265015234774692


def lock_holders(key: int) -> int:
    return len(advisory_lock_holders(key))


def test_job_lock_key_is_the_documented_number():
    assert advisory_lock_key(LOCK_NAME) == JOB_LOCK_KEY
    assert advisory_lock_key("another name") != JOB_LOCK_KEY


def test_lock_is_taken_and_released():
    session = job_session()
    with advisory_lock(session, LOCK_NAME) as acquired:
        assert acquired
        assert session.holder == (connection.connection.info.backend_pid, str(session.run_id))
        assert advisory_lock_holders(JOB_LOCK_KEY) == [connection.connection.info.backend_pid]
    assert lock_holders(JOB_LOCK_KEY) == 0
    assert session.holder is None


def test_lock_held_by_another_session_is_not_acquired_and_not_released_by_us():
    with job_lock_held_elsewhere():
        with advisory_lock(job_session(), LOCK_NAME) as acquired:
            assert not acquired
        assert lock_holders(JOB_LOCK_KEY) == 1


def test_lock_is_released_when_the_body_raises():
    with pytest.raises(RuntimeError), advisory_lock(job_session(), LOCK_NAME):
        raise RuntimeError("boom")
    assert lock_holders(JOB_LOCK_KEY) == 0


def test_a_statement_on_another_session_than_the_holder_is_refused():
    session = job_session()
    session.holder = (1234, "run-a")

    prove_holder(session, 1234, "run-a")
    for other in ((1235, "run-a"), (1234, "run-b"), (1234, None)):
        with pytest.raises(PooledSessionError):
            prove_holder(session, *other)

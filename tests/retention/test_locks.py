import psycopg
import pytest
from django.db import connection

from retention.locks import advisory_lock, advisory_lock_key
from retention.service import LOCK_NAME
from tests.conftest import database_url_of_tests

pytestmark = pytest.mark.django_db

# Documented in the README: operators look for this key in pg_locks.
JOB_LOCK_KEY = 3155265015234774692


def lock_holders(key: int) -> int:
    classid, objid = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
    with connection.cursor() as cursor:
        cursor.execute(
            # Advisory locks are per database; pg_locks lists the whole cluster's (other test runs' too).
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s"
            " AND objsubid = 1 AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [classid, objid],
        )
        return cursor.fetchone()[0]


def test_job_lock_key_is_the_documented_number():
    assert advisory_lock_key(LOCK_NAME) == JOB_LOCK_KEY
    assert advisory_lock_key("another name") != JOB_LOCK_KEY


def test_lock_is_taken_and_released():
    with advisory_lock(LOCK_NAME) as acquired:
        assert acquired is True
        assert lock_holders(JOB_LOCK_KEY) == 1
    assert lock_holders(JOB_LOCK_KEY) == 0


def test_lock_held_by_another_session_is_not_acquired_and_not_released_by_us():
    with psycopg.connect(database_url_of_tests(), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s)", [JOB_LOCK_KEY])
        with advisory_lock(LOCK_NAME) as acquired:
            assert acquired is False
        assert lock_holders(JOB_LOCK_KEY) == 1


def test_lock_is_released_when_the_body_raises():
    with pytest.raises(RuntimeError), advisory_lock(LOCK_NAME):
        raise RuntimeError("boom")
    assert lock_holders(JOB_LOCK_KEY) == 0


def test_an_unlock_that_finds_no_lock_is_logged_as_an_error(caplog):
    with advisory_lock(LOCK_NAME):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [JOB_LOCK_KEY])
    assert any(r.levelname == "ERROR" and "not held" in r.getMessage() for r in caplog.records)

"""The server keeps the run's bounds (retention.session): the job's session carries them from its first statement,
derived from the limits, its COMMITs wait for no standby, and libpq keeps the same keepalives on the job's end; after
the run the session is back to its defaults, so that an in-process caller's connection keeps none of them."""

from datetime import timedelta

import pytest
from django.db import connection

from retention.session import BOUNDS
from tests.support import job_session

pytestmark = pytest.mark.django_db(transaction=True)


def settings_of(cursor) -> dict[str, str]:
    cursor.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [list(BOUNDS)])
    return dict(cursor.fetchall())


def test_the_session_carries_idle_and_dead_peer_bounds_above_the_longest_pause_and_commits_locally():
    session = job_session(batch_pause=timedelta(seconds=2), batch_pause_factor=1.0,
                          statement_timeout=timedelta(seconds=10), dead_peer_timeout=timedelta(seconds=30))
    with session, session.transaction() as cursor:
        bounds = settings_of(cursor)
        over_tcp = not connection.connection.info.host.startswith("/")  # a Unix socket has no TCP settings

    assert bounds["statement_timeout"] == "10000"
    assert bounds["idle_session_timeout"] == str((2 + 10 + 30) * 1000)  # ms: the longest pause plus the dead peer
    assert bounds["idle_in_transaction_session_timeout"] == "30000"
    assert bounds["client_connection_check_interval"] == "1000"
    assert bounds["tcp_user_timeout"] == ("30000" if over_tcp else "0")
    assert bounds["synchronous_commit"] == "local"  # no COMMIT of the job waits for a standby


def test_libpq_gives_up_on_a_silent_server_after_the_dead_peer_timeout_too(settings):
    options = settings.DATABASES["default"]["OPTIONS"]
    dead_peer = settings.DELISTED_RETENTION_DEAD_PEER_TIMEOUT_SECONDS

    assert options["keepalives"] == 1 and options["tcp_user_timeout"] == dead_peer * 1000
    assert options["connect_timeout"] == settings.CONNECT_TIMEOUT_SECONDS == 10  # a server that never answers
    assert options["keepalives_idle"] + options["keepalives_interval"] * options["keepalives_count"] <= dead_peer + 3


def test_the_longest_pause_never_outlasts_the_run():
    limits = job_session(batch_pause=timedelta(seconds=60), batch_pause_factor=100.0,
                         statement_timeout=timedelta(days=20), max_duration=timedelta(seconds=600)).limits
    assert limits.longest_pause == timedelta(seconds=600)


def test_after_the_run_the_connection_is_back_to_its_defaults():
    with job_session() as session:
        with session.transaction() as cursor:
            assert settings_of(cursor)["idle_session_timeout"] != "0"

    with connection.cursor() as cursor:
        assert settings_of(cursor)["idle_session_timeout"] == "0"
        assert settings_of(cursor)["statement_timeout"] == "0"
        assert settings_of(cursor)["synchronous_commit"] == "on"

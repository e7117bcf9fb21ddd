"""Pacing by the streaming standbys: how far behind the slowest one is, read on the primary from `pg_stat_replication`,
and the run's wait for them before a batch. A role that cannot see the WAL senders' details is refused rather than
told there is no lag. The estimate, and its limits: docs/how-it-works.md, "Replica lag".
"""

import time
from datetime import timedelta

from retention.results import Run
from retention.session import JobSession, Session
from retention.spans import traced
from retention.statements import STATEMENTS

REPLICA_LAG_POLL = 0.5  # seconds between two looks at the standbys' lag while the run waits for them
LAG_HIDDEN_MESSAGE = (
    "the database role cannot read the standbys' replication lag (pg_stat_replication shows it only to members "
    "of pg_read_all_stats): grant pg_read_all_stats to the role (deploy/sql/catalog_retention_role.sql)"
)


class ReplicaLagHidden(PermissionError):
    """The role cannot see the standbys' lag (LAG_HIDDEN_MESSAGE)."""


def replica_lag(session: Session) -> timedelta | None:
    """How far behind in time the slowest standby is, as the primary sees it (see the module docstring); None
    when no standby is connected. A transaction of its own: call it outside any transaction."""
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["replica lag"])
        standbys, hidden, worst_lag = cursor.fetchone()
    if hidden:
        raise ReplicaLagHidden(LAG_HIDDEN_MESSAGE)
    if not standbys:
        return None
    return worst_lag


def wait_for_replicas(session: JobSession, run: Run) -> bool:
    """With max_replica_lag set, let the standbys catch up before a batch: poll the slowest one's lag until it is
    within max_replica_lag. Whether they did; they did not when they stayed behind for longer than replica_lag_wait,
    or a stop or the run's end came first (the caller's next check says which)."""
    max_lag, started = session.limits.max_replica_lag, time.monotonic()
    if not max_lag:
        return True
    max_wait = min(session.limits.replica_lag_wait, session.left()).total_seconds()
    with traced("replica_lag_wait", {"retention.limit.max_replica_lag": max_lag.total_seconds()}):
        while (lag := replica_lag(session)) is not None and lag > max_lag:
            waited = time.monotonic() - started
            if waited >= max_wait or session.stop.requested:
                break
            session.sleep(min(REPLICA_LAG_POLL, max_wait - waited))
    waited, caught_up = time.monotonic() - started, lag is None or lag <= max_lag
    run.replica_lag_wait += waited
    if waited > 0.01:
        session.log.info(
            "waited for the standbys" if caught_up else "the standbys stayed behind",
            extra={"waited_seconds": round(waited, 3), "replica_lag_seconds": lag and round(lag.total_seconds(), 3),
                   "max_replica_lag_seconds": max_lag.total_seconds()},
        )
    return caught_up

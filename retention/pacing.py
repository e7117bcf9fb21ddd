"""Pacing by the streaming standbys: how far behind the slowest one is, read on the primary from
`pg_stat_replication`, and a bounded, stoppable wait for it. A role that cannot see the WAL senders' details is refused
(ReplicaLagHidden) rather than told there is no lag. The estimate, and its limits: docs/how-it-works.md, "Replica lag".
"""

import time
from dataclasses import dataclass
from datetime import timedelta

from retention.session import JobSession, Session
from retention.statements import STATEMENTS

POLL_INTERVAL = timedelta(milliseconds=500)
LAG_HIDDEN_MESSAGE = (
    "the database role cannot read the standbys' replication lag (pg_stat_replication shows it only to members "
    "of pg_read_all_stats): grant pg_read_all_stats to the role (deploy/sql/catalog_retention_role.sql)"
)


class ReplicaLagHidden(PermissionError):
    def __init__(self):
        super().__init__(LAG_HIDDEN_MESSAGE)


@dataclass(frozen=True)
class ReplicaWait:
    waited: timedelta
    caught_up: bool
    last_lag: timedelta | None


def replica_lag(session: Session) -> timedelta | None:
    """How far behind in time the slowest standby is, as the primary sees it (see the module docstring); None
    when no standby is connected. A transaction of its own: call it outside any transaction."""
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["replica lag"])
        standbys, hidden, worst_lag = cursor.fetchone()
    if hidden:
        raise ReplicaLagHidden()
    if not standbys:
        return None
    return worst_lag


def wait_for_replicas(session: JobSession, *, max_lag: timedelta, max_wait: timedelta) -> ReplicaWait:
    """Return at once when no standby lags more than `max_lag` (or there is none); otherwise poll the lag every
    POLL_INTERVAL until it is within `max_lag` (caught_up), or `max_wait` or the run's time has passed, or a stop
    is requested."""
    started = time.monotonic()
    max_wait = min(max_wait, session.left())
    while True:
        lag = replica_lag(session)
        waited = timedelta(seconds=time.monotonic() - started)
        if lag is None or lag <= max_lag:
            return ReplicaWait(waited=waited, caught_up=True, last_lag=lag)
        if waited >= max_wait or not session.sleep(min(POLL_INTERVAL, max_wait - waited).total_seconds()):
            return ReplicaWait(waited=timedelta(seconds=time.monotonic() - started), caught_up=False, last_lag=lag)

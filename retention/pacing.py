"""Pacing by the streaming standbys: how far behind the slowest one is, and a bounded, stoppable wait for it.

The lag is read on the primary from `pg_stat_replication`, one row per WAL sender, without connecting to the
standbys. Per standby:

* 0 when it has replayed everything the primary has written (`replay_lsn >= pg_current_wal_lsn()`). The
  `replay_lag` column is history then: after a standby catches up it keeps showing the lag of the last record
  it replayed for up to two `wal_receiver_status_interval`s, and a job waiting on it would wait for nothing.
* Otherwise `replay_lag`, the primary's own measure of how long ago it flushed the WAL the standby has replayed
  up to; while replay is stuck it interpolates that flush time, so the value grows with every standby reply.
  Between replies it stands still: with replay paused on an idle primary the standby replies only every
  `wal_receiver_status_interval` (10 s by default). So when the standby's last reply showed WAL flushed on it but
  not replayed (replay stuck or slow), the time since that reply is added: `replay_lag + (clock_timestamp() -
  reply_time)` is how far behind it is now if replay has not moved since, and grows continuously. WAL merely in
  flight since a reply that showed everything received replayed adds nothing: a healthy standby reports its replay
  within milliseconds of receiving.
* A standby that has not measured anything yet (NULL `replay_lag`) counts as 0.

The measurements behind these rules: docs/benchmark-findings.md, "How pg_stat_replication reports a standby's lag".

Limits: `reply_time` is the standby's clock, so clock skew between the servers enters the estimate (a negative
age counts as 0). A standby whose connection hangs stops replying and keeps its last `replay_lag` until
`wal_sender_timeout` drops its row; a disconnected standby has no row at all and is not waited for. After a
reconnect the primary's lag clock starts at the reconnect.

Details of WAL senders are visible only to superusers and members of `pg_read_all_stats` (other roles get the
pid and NULLs): reading the lag without that refuses with ReplicaLagHidden rather than reading NULLs as "no lag".
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

from django.db import connections, transaction

# A hung or overloaded primary must not stall the job in the lag query.
LAG_QUERY_TIMEOUT_MS = 2000
MAX_POLL_INTERVAL = timedelta(seconds=1)
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
    stopped: bool
    last_lag: timedelta | None


@contextmanager
def short_transaction(using: str) -> Iterator:
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute("SELECT set_config('statement_timeout', %s, true)", [f"{LAG_QUERY_TIMEOUT_MS}ms"])
        yield cursor


def replica_lag(using: str = "default", *, bounded_transaction: Callable | None = None) -> timedelta | None:
    """How far behind in time the slowest standby is, as the primary sees it (see the module docstring); None
    when no standby is connected. The query runs in a transaction of its own, `bounded_transaction()` (the run's
    bounds and stop request) or one under a short statement_timeout: call it outside any transaction."""
    with (bounded_transaction or (lambda: short_transaction(using)))() as cursor:
        # pg_basebackup's WAL senders (state 'backup') copy files; they are not standbys.
        cursor.execute(
            """
            SELECT count(*),
                   bool_or(state IS NULL),
                   max(CASE
                       WHEN replay_lsn >= pg_current_wal_lsn() THEN interval '0'
                       WHEN replay_lsn < flush_lsn THEN coalesce(replay_lag, interval '0')
                           + greatest(clock_timestamp() - reply_time, interval '0')
                       ELSE coalesce(replay_lag, interval '0')
                   END)
              FROM pg_stat_replication
             WHERE state IS DISTINCT FROM 'backup'
            """
        )
        standbys, hidden, worst_lag = cursor.fetchone()
    if hidden:
        raise ReplicaLagHidden()
    if not standbys:
        return None
    return worst_lag


def wait_for_replicas(
    *,
    max_lag: timedelta,
    max_wait: timedelta,
    should_stop: Callable[[], bool],
    using: str = "default",
    bounded_transaction: Callable | None = None,
    poll_interval: timedelta = timedelta(milliseconds=500),
) -> ReplicaWait:
    """Return at once when no standby lags more than `max_lag` (or there is none); otherwise poll the lag every
    `poll_interval` until it is within `max_lag` (caught_up), `max_wait` has passed (neither flag) or
    `should_stop()` says so (stopped), asking it before every poll."""
    if not timedelta(0) < poll_interval <= MAX_POLL_INTERVAL:
        raise ValueError(f"poll_interval must be above 0 and at most {MAX_POLL_INTERVAL}, got {poll_interval}")
    started = time.monotonic()

    def result(*, caught_up: bool = False, stopped: bool = False) -> ReplicaWait:
        waited = timedelta(seconds=time.monotonic() - started)
        return ReplicaWait(waited=waited, caught_up=caught_up, stopped=stopped, last_lag=lag)

    while True:
        lag = replica_lag(using, bounded_transaction=bounded_transaction)
        if lag is None or lag <= max_lag:
            return result(caught_up=True)
        if should_stop():
            return result(stopped=True)
        left = max_wait.total_seconds() - (time.monotonic() - started)
        if left <= 0:
            return result()
        time.sleep(min(poll_interval.total_seconds(), left))

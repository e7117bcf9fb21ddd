"""DelistedRetentionJob: physically delete catalog cards that have been Delisted for longer than the retention.

Deletion is irreversible, so the safety design is explicit:

* Only rows matching the predicate `status = 'Delisted' AND updated_at < cutoff` are ever selected, and the
  DELETE repeats that predicate as a guard. `cutoff` is computed once per run from the database clock. A
  Delisted row is frozen (INV-7, INV-5), so `updated_at` is the moment it was delisted.
* Every batch is one transaction of one statement: it locks its cards `FOR UPDATE SKIP LOCKED`, deletes them and
  their display overrides (live and soft-deleted), and returns the counts. A failing batch rolls back whole;
  earlier batches stay committed; the next run resumes from the data (no checkpoint, no audit, no outbox rows).
* The DELETE finds the locked rows by their row address (`ctid`), which cannot change while this transaction
  holds their row locks: no UPDATE or DELETE can touch them, and VACUUM never moves a live row.
* Property objects go first, projects second. A project that still has any property-object card is never
  selected, and the project DELETE re-checks that after its rows are locked, with a fresh snapshot
  (retention.phases, PROJECTS): an object upsert holds its project `FOR KEY SHARE`, so once the project is locked
  no object can appear under it, and any that appeared before is visible to the re-check. No property object is
  left dangling. First of all, the job sweeps display overrides whose card is gone (written by a writer that did
  not follow catalog.operations' protocol), scanning the recent ones in chunks outside any row-locking
  transaction.
* A source upsert that holds a row lock wins: SKIP LOCKED passes over the row, and once restored the row no
  longer matches the predicate. If the job locks first, the card is deleted and the upsert creates a fresh one.
* The run holds the advisory lock on its own session, and each batch statement returns the session it ran on, which
  is checked before it commits (retention.locks): behind a transaction-pooling PgBouncer the job refuses instead of
  overlapping.
* Between batches it pauses (fixed, and/or a factor of the last batch's time), and with max_replica_lag set it waits
  for the streaming standbys to catch up, stopping with `replica_lag` when they stay behind.
* Every statement runs under lock_timeout and a statement_timeout no longer than what is left of the run (settings
  of the session, set once), a stop request (SIGTERM) cancels the statement in flight, and the run's deadline the
  batch in flight, COMMIT included.
* A batch that fails for a data reason (a trigger raising, a constraint) is redone in one transaction, split in
  halves under savepoints until the culprit cards are isolated: the rest is deleted, the culprits are skipped by the
  run's later batches, counted, listed up to CULPRITS_LISTED, and the run counts as failed. Two consecutive batches
  refused whole, or more than MAX_CULPRITS culprits, are a systemic failure: the run stops. An infrastructure error
  (connection lost, a timeout, a deadlock, an internal error) ends the run.

Read top-down: the entry point (purge_delisted_cards), the run's state (Run), the run under its lock (locked_run),
the batch loop (run_phases, delete_batch, isolate_culprits). Each phase's SQL is in retention.phases, the dry run in
retention.preview.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

import psycopg
from django.conf import settings
from django.db import DatabaseError, OperationalError, connections, transaction

from config.logging import RunLog
from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.limits import PurgeLimits
from retention.locks import (
    SESSION_MARKER, LockSession, PooledSessionError, PoolerWaitStopped, PoolSaturated, advisory_lock,
)
from retention.metrics import RunMetrics
from retention.pacing import ReplicaLagHidden, wait_for_replicas
from retention.phases import CARD_PHASES, PHASES, PROJECTS, PROPERTY_OBJECTS, SCAN_CHUNK, Phase
from retention.preview import preview_purge
from retention.results import Culprit, PurgeFailed, PurgeResult, StopReason

logger = logging.getLogger(__name__)
T = TypeVar("T")

LOCK_NAME = "job:scheduled:catalog-delisted-retention"
# SQLSTATE classes of errors that belong to the rows, not to the database: data exceptions (22), integrity
# constraint violations (23), PL/pgSQL raise (P0: a RAISE without a code is P0001). XX000 (internal_error: "cache
# lookup failed", "tuple concurrently updated") is the database's own fault and ends the run.
DATA_ERROR_CLASSES = ("22", "23", "P0")
UNDEFINED_OBJECT_STATES = ("42P01", "3F000")  # undefined table, invalid schema name
QUERY_CANCELED = "57014"  # statement_timeout, or a cancel request
# A statement bound never shorter than this, so that the end of a run can still count what it left.
MIN_STATEMENT_TIMEOUT = timedelta(seconds=1)
# PostgreSQL's WARNING when a COMMIT's wait for a synchronous standby is cancelled or terminated (syncrep.c): the
# COMMIT then returns success, the transaction is committed locally.
SYNC_WAIT_CANCEL_NOTICE = "wait for synchronous replication"
SYNC_WAIT_CANCELLED_MESSAGE = (
    "a batch committed on the primary but its synchronous standby did not confirm it (the wait was cancelled by "
    "the run's stop or time limit): the run stops; check the standby named in synchronous_standby_names"
)
IDS_PER_LOG_LINE = 150  # ~6 KB of uuids: every log line stays under 8 KiB
CULPRITS_LISTED = 20  # culprits logged one by one and carried in the result; the rest are only counted
# More culprits than this in one run is no longer a few poison cards but a systemic refusal: the run stops.
MAX_CULPRITS = 5000
CULPRITS = ("{count} card(s) cannot be deleted and were left in place; the first {listed} are logged with their id"
            " and error")
REFUSED_BATCHES = "every card of {batches} consecutive batches was refused ({count} culprits): {error}; run stopped"
TOO_MANY_CULPRITS = "more than {cap} cards cannot be deleted ({count} culprits): {error}; run stopped"
SCHEMA_MISSING = "the catalog schema is missing in database {alias!r}: run `manage.py migrate`"
DATABASE_UNREACHABLE = "database {alias!r} is unreachable: {error}"




def purge_delisted_cards(
    limits: PurgeLimits | None = None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    stop: StopRequest | None = None,
    on_start: Callable[[Backlog], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    using: str | None = None,
) -> PurgeResult:
    """Run the job once on database `using` (default: DELISTED_RETENTION_LOCK_DATABASE): take the advisory lock (a
    busy lock is a normal skip), purge property objects, then projects, then orphan overrides.

    `limits` default to the settings: `purge_delisted_cards()` runs tonight's job. `now` replaces the database
    clock in tests only. `stop` ends the run gracefully (the command wires it to SIGTERM/SIGINT); `on_start` gets
    the backlog counted at the start, `on_batch` how many cards each batch deleted (progress). A dry run takes no
    lock and no row locks: it counts what this run would delete. A real run hands its metrics to the sinks the
    settings switch on (retention.metrics). Raises PurgeFailed when the run failed, with what it did before.
    """
    limits = limits or PurgeLimits.from_settings()
    using = job_database(using)
    run_id = uuid.uuid4()
    run = Run(limits=limits, using=using, stop=stop or StopRequest(), log=RunLog(logger, {"run_id": str(run_id)}),
              run_id=run_id)
    with run.deadline():
        if dry_run:
            try:
                return fail_cleanly(run, lambda: dry_run_result(run, now), dry_run=True)
            except StopRun as stop:
                return run.result(stop.reason, dry_run=True)
        metrics = RunMetrics(log=run.log, max_duration=limits.max_duration)
        try:
            result, at_end = fail_cleanly(run, lambda: locked_run(
                run, now, metrics, on_start or (lambda backlog: None), on_batch or (lambda deleted: None)
            ))
        except PoolerWaitStopped:  # SIGTERM while the pooler had no server for the job: nothing was locked
            result, at_end = run.result(StopReason.STOPPED), None
        except PurgeFailed as failure:
            metrics.run_finished(failure.result)
            raise
        if result.culprits:
            result = dataclasses.replace(result, error=run.systemic_failure or CULPRITS.format(
                count=result.culprit_count, listed=len(result.culprits)))
        elif run.unconfirmed_commit and result.stop_reason is StopReason.MAX_DURATION:
            # Not a limit reached: the synchronous standby is gone, and cron must hear of it.
            result = dataclasses.replace(result, stop_reason=StopReason.FAILED, error=SYNC_WAIT_CANCELLED_MESSAGE)
        metrics.run_finished(result, at_end)
        if result.error:
            raise PurgeFailed(result)
        return result


class StopRequest:
    """A graceful stop, asked by SIGTERM/SIGINT (the command) or by a caller: checked before every batch and during
    every wait, and it cancels the statement in flight, whose transaction then rolls back whole."""

    def __init__(self):
        self._requested = threading.Event()
        # Held while a cancel is sent and while the registration changes, so that a cancel reaches only the
        # transaction it was meant for, never the next one on the same connection.
        self._lock = threading.Lock()
        self._in_flight = None  # (the psycopg connection, a token of its transaction, whether it writes)

    def request(self) -> None:
        self._requested.set()
        in_flight = self._in_flight
        if in_flight is not None:
            # From a thread: a signal handler must not block on the network.
            threading.Thread(target=self.cancel, args=(in_flight,), daemon=True).start()

    def cancel(self, registration: tuple) -> None:
        with self._lock:
            if self._in_flight is registration:
                cancel_quietly(registration[0])

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def sleep(self, seconds: float) -> None:
        """Sleep, waking at once on a stop request."""
        self._requested.wait(seconds)

    def cancel_in_flight(self) -> None:
        """Cancel the transaction in flight if it writes (the run's deadline timer): a COMMIT waiting for a
        synchronous standby is bound by no statement_timeout. A read is left to its statement_timeout, so that
        the end of a run can still count what it left."""
        if (in_flight := self._in_flight) is not None and in_flight[2]:
            self.cancel(in_flight)

    @contextmanager
    def cancelling(self, database_connection, *, writes: bool = True) -> Iterator[None]:
        """Cancel what `database_connection` runs in the block on a stop request, and at the run's deadline if it
        `writes`, COMMIT included."""
        registration = (database_connection, object(), writes)
        with self._lock:
            self._in_flight = registration
        try:
            yield
        finally:
            with self._lock:
                self._in_flight = None


def record_sync_wait_cancel(cancelled: list, notice) -> None:
    if SYNC_WAIT_CANCEL_NOTICE in (notice.message_primary or ""):
        cancelled.append(notice.message_primary)


def cancel_quietly(database_connection) -> None:
    try:
        database_connection.cancel_safe(timeout=5)
    except Exception as error:  # the connection may be gone; the stop flag still ends the run
        logger.warning("could not cancel the statement in flight: %s", error)


@dataclass(frozen=True)
class BatchOutcome:
    selected: int
    deleted_cards: int
    deleted_overrides: int
    last_key: tuple | None = None  # the key of the batch's last row: where the phase's next batch resumes


class BatchRefused(Exception):
    """A batch failed because of its rows: redo it in parts to find the culprits. `params`: the batch's, which
    select the same rows again."""

    def __init__(self, error: DatabaseError, params: dict):
        super().__init__(str(error))
        self.error = error
        self.params = params


class StopRun(Exception):
    """A statement was cancelled because the run must stop (a stop request, or the run's duration ran out)."""

    def __init__(self, reason: StopReason):
        super().__init__(reason)
        self.reason = reason


@dataclass
class Run:
    """One run's state: its limits and clock, its database session, and what it has deleted so far."""

    limits: PurgeLimits
    using: str
    stop: StopRequest
    log: RunLog
    run_id: uuid.UUID
    started: float = field(default_factory=time.monotonic)
    lock_session: LockSession | None = None
    cutoff: datetime | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("deleted_property_object_cards", "deleted_project_cards", "deleted_property_object_overrides",
         "deleted_building_overrides"), 0,
    ))
    batches: int = 0
    culprits: list[Culprit] = field(default_factory=list)
    refused_batches: int = 0  # consecutive batches of which every card was a culprit
    systemic_failure: str | None = None
    replica_lag_wait: float = 0.0
    unconfirmed_commit: bool = False  # a COMMIT's wait for the synchronous standby was cancelled
    session_timeouts: tuple | None = None  # (the session, its statement_timeout, its lock_timeout in ms)

    @property
    def application_name(self) -> str:
        return f"purge_delisted {self.run_id}"

    def left(self) -> timedelta:
        return self.limits.max_duration - timedelta(seconds=time.monotonic() - self.started)

    @contextmanager
    def transaction(self, *, batch: bool = False) -> Iterator:
        """A transaction whose every statement waits at most lock_timeout for a lock and runs at most
        statement_timeout, and never past what is left of the run; a stop request or the run's deadline cancels
        its statement, COMMIT included. A `batch` does not start once a stop is requested.

        The timeouts are settings of the session, set with its application name by the first transaction on it:
        later transactions pay a statement for them (SET LOCAL) only once the time left shrinks below them."""
        statement_timeout = milliseconds(max(MIN_STATEMENT_TIMEOUT, min(self.limits.statement_timeout, self.left())))
        lock_timeout = min(milliseconds(self.limits.lock_timeout), statement_timeout)
        connection = connections[self.using]
        connection.ensure_connection()
        session = connection.connection  # Django drops it when it breaks
        sync_wait_cancelled = []
        notice_handler = partial(record_sync_wait_cancel, sync_wait_cancelled)
        session.add_notice_handler(notice_handler)
        try:
            with self.stop.cancelling(session, writes=batch):
                # A stop asked before the registration above had nothing to cancel.
                if batch and self.stop.requested:
                    raise StopRun(StopReason.STOPPED)
                try:
                    with transaction.atomic(using=self.using), connection.cursor() as cursor:
                        self.bound_session(cursor, session, statement_timeout, lock_timeout)
                        yield cursor
                except BaseException as error:
                    self.session_timeouts = None  # rolled back: a SET in the transaction is undone
                    if isinstance(error, DatabaseError) and sqlstate(error) == QUERY_CANCELED:
                        if self.stop.requested:
                            raise StopRun(StopReason.STOPPED) from error
                        if self.left() <= timedelta(0):
                            raise StopRun(StopReason.MAX_DURATION) from error
                    raise
        finally:
            session.remove_notice_handler(notice_handler)
        if sync_wait_cancelled:
            # Committed here, not confirmed by the standby: the caller counts the batch, the run stops.
            self.unconfirmed_commit = True
            self.log.warning(SYNC_WAIT_CANCELLED_MESSAGE)

    def bound_session(self, cursor, session, statement_timeout: int, lock_timeout: int) -> None:
        """Set the timeouts (milliseconds): for the session on its first transaction, then for one transaction
        when they are below the session's."""
        if self.session_timeouts is not None and self.session_timeouts[0] is session:
            _, session_statement_timeout, session_lock_timeout = self.session_timeouts
            if statement_timeout >= session_statement_timeout and lock_timeout >= session_lock_timeout:
                return
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true)",
                [f"{statement_timeout}ms", f"{lock_timeout}ms"],
            )
            return
        cursor.execute(
            "SELECT set_config('statement_timeout', %s, false), set_config('lock_timeout', %s, false),"
            " set_config('application_name', %s, false)",
            [f"{statement_timeout}ms", f"{lock_timeout}ms", self.application_name],
        )
        self.session_timeouts = (session, statement_timeout, lock_timeout)

    @contextmanager
    def deadline(self) -> Iterator[None]:
        """The run's time limit on what runs on its session: at max_duration the statement in flight is
        cancelled, COMMIT included. On the way out the session's timeouts go back to its defaults."""
        timer = threading.Timer(self.limits.max_duration.total_seconds(), self.stop.cancel_in_flight)
        timer.daemon = True
        timer.start()
        try:
            yield
        finally:
            timer.cancel()
            self.reset_session()

    def reset_session(self) -> None:
        connection = connections[self.using]
        if self.session_timeouts is None or connection.connection is not self.session_timeouts[0]:
            return  # nothing set, or set on a session that is gone
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config(name, reset_val, false) FROM pg_settings"
                               " WHERE name IN ('statement_timeout', 'lock_timeout')")
        except DatabaseError as error:
            self.log.warning("could not reset the session's timeouts: %s", first_line(error))
        self.session_timeouts = None

    def verify_session(self, backend_pid: int, marker: str | None) -> None:
        """That a batch ran on the session holding the advisory lock (retention.locks)."""
        if self.lock_session is not None:
            self.lock_session.verify(backend_pid, marker)

    def stop_if_due(self) -> None:
        """Before a batch: raise StopRun when the run must not start it."""
        if self.stop.requested:
            raise StopRun(StopReason.STOPPED)
        if self.unconfirmed_commit:  # only the run's time limit cancels a commit without a stop request
            raise StopRun(StopReason.MAX_DURATION)
        if self.batches >= self.limits.max_batches:
            raise StopRun(StopReason.MAX_BATCHES)
        if self.left() <= timedelta(0):
            raise StopRun(StopReason.MAX_DURATION)

    def result(self, stop_reason: StopReason, **fields) -> PurgeResult:
        return PurgeResult(
            run_id=self.run_id, cutoff=self.cutoff, stop_reason=stop_reason, batches_processed=self.batches,
            culprits=tuple(self.culprits[:CULPRITS_LISTED]), culprit_count=len(self.culprits),
            replica_lag_wait_seconds=round(self.replica_lag_wait, 3),
            duration_seconds=round(time.monotonic() - self.started, 3), **self.counts, **fields,
        )


def job_database(using: str | None) -> str:
    """The database alias a run uses: `using`, else DELISTED_RETENTION_LOCK_DATABASE. An empty alias is a mistake,
    not a request for the default."""
    return settings.DELISTED_RETENTION_LOCK_DATABASE if using is None else using


def fail_cleanly(run: Run, body: Callable[[], T], *, dry_run: bool = False) -> T:
    """Run `body`; an infrastructure error becomes PurgeFailed, with a one-line error and what the run did."""
    try:
        return body()
    except (DatabaseError, psycopg.Error, PooledSessionError, PoolSaturated, ReplicaLagHidden) as error:
        message = describe_failure(error, run.using)
        raise PurgeFailed(run.result(StopReason.FAILED, error=message, dry_run=dry_run)) from error


def dry_run_result(run: Run, now: datetime | None) -> PurgeResult:
    run.cutoff = compute_cutoff(run.limits.retention, now, run.using, transaction=run.transaction)
    return preview_purge(
        run_id=run.run_id, cutoff=run.cutoff, limits=run.limits, transaction=run.transaction, started=run.started,
    )


def describe_failure(error: Exception, alias: str) -> str:
    if isinstance(error, (PooledSessionError, PoolSaturated, ReplicaLagHidden)):
        return str(error)
    if sqlstate(error) in UNDEFINED_OBJECT_STATES:
        return SCHEMA_MISSING.format(alias=alias)
    if sqlstate(error) is None and isinstance(error, OperationalError):
        return DATABASE_UNREACHABLE.format(alias=alias, error=first_line(error))
    return first_line(error)


def locked_run(run: Run, now, metrics: RunMetrics, on_start, on_batch) -> tuple[PurgeResult, Backlog | None]:
    """The run under the advisory lock; returns its result and the backlog counted at its end."""
    with advisory_lock(
        LOCK_NAME, using=run.using, marker=str(run.run_id), transaction=run.transaction,
        pooler=settings.DELISTED_RETENTION_POOLER, time_left=run.left, stop=run.stop,
    ) as lock_session:
        if lock_session is None:
            run.log.warning("purge skipped: the advisory lock is held by another run", extra={"lock": LOCK_NAME})
            return run.result(StopReason.LOCK_BUSY), None
        run.lock_session = lock_session
        at_start = None
        try:
            run.cutoff = compute_cutoff(run.limits.retention, now, run.using, transaction=run.transaction)
            # What the run starts from; the held-back projects are counted at the end, where they are reported.
            at_start = measure_backlog(
                cutoff=run.cutoff, transaction=run.transaction, count_held_back=False, in_chunks=True,
            )
            metrics.run_started(at_start)
            run.log.info(
                "purge started",
                extra={"cutoff": run.cutoff.isoformat(), "database": run.using, "batch_size": run.limits.batch_size,
                       "overdue_property_objects": at_start.property_objects.overdue,
                       "overdue_projects": at_start.projects.overdue},
            )
            on_start(at_start)
            run_phases(run, on_batch)
            stop_reason = StopReason.COMPLETED
        except StopRun as stop:
            stop_reason = stop.reason
        if at_start is None:  # a SIGTERM or the run's time cancelled the start count
            return run.result(stop_reason), None
        try:
            at_end = measure_backlog(
                cutoff=run.cutoff, transaction=run.transaction, within_window_from=at_start, in_chunks=True,
            )
        except StopRun:
            at_end = None  # what is left stays unknown
        result = run.result(
            stop_reason,
            has_more=at_end and overdue_left(at_end, run.culprits),
            projects_held_back=at_end and at_end.projects.held_back,
            overdue_property_object_cards=at_start.property_objects.overdue,
            overdue_project_cards=at_start.projects.overdue,
        )
    run.log.info("purge completed", extra=summary_fields(result))
    return result, at_end


def overdue_left(backlog: Backlog, culprits: list[Culprit]) -> bool:
    """Whether overdue cards remain that a later run can delete: those skipped because another transaction held
    them, or left by a limit. Culprits and projects held back by a remaining object do not count."""
    culprit_cards = {phase.name: sum(c.phase == phase.name for c in culprits) for phase in CARD_PHASES}
    return (
        backlog.property_objects.overdue > culprit_cards[PROPERTY_OBJECTS.name]
        or backlog.projects.overdue - backlog.projects.held_back > culprit_cards[PROJECTS.name]
    )


def summary_fields(result: PurgeResult) -> dict:
    fields = result.as_dict()
    fields.pop("run_id")
    fields["culprits"] = [culprit.card_id for culprit in result.culprits]
    return fields


def run_phases(run: Run, on_batch: Callable[[int], None]) -> None:
    """Every phase in turn until it runs dry; StopRun ends the loop between batches (or cancels the one in flight)."""
    last_batch_seconds = None
    for phase in PHASES:
        scan = CandidateScan(phase) if phase.scan_sql else None
        resume_after = last_key = phase.first_key  # where a batch resumes (retention.phases, Phase), where it got
        while True:
            if last_batch_seconds is not None:
                run.stop.sleep(run.limits.batch_pause.total_seconds()
                               + run.limits.batch_pause_factor * last_batch_seconds)
            run.stop_if_due()
            wait_for_replicas_if_asked(run)
            only_ids = scan.next_candidates(run) if scan else None
            if only_ids == []:
                break  # the scan found no candidate left
            started = time.monotonic()
            try:
                outcome = delete_batch(run, phase, resume_after, only_ids)
            except BatchRefused as refusal:
                outcome = isolate_culprits(run, phase, refusal)
                stop_if_systemic(run, phase, outcome, refusal.error)
            else:
                run.refused_batches = 0
            # After a redone batch (culprits) the next resumes as it did: its culprits are skipped, the rest is gone.
            if outcome.last_key:
                resume_after, last_key = last_key, outcome.last_key
            # The pause rests the database after work; an empty selection (a phase ran dry) did none.
            last_batch_seconds = time.monotonic() - started if outcome.selected else None
            if outcome.selected:
                on_batch(outcome.deleted_cards)
            # A phase with a scan runs dry when its candidates are all taken, any other on a short batch.
            if (scan.done if scan else outcome.selected < run.limits.batch_size):
                break


@dataclass
class CandidateScan:
    """How far a phase's scan for candidates (retention.phases, `scan_sql`) has got, and the candidates it found that
    no batch has taken yet."""

    phase: Phase
    after: tuple = ()  # the key of the last row scanned
    exhausted: bool = False
    candidates: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.exhausted and not self.candidates

    def next_candidates(self, run: Run) -> list[str]:
        """Up to a batch of candidates, scanning on in chunks (each its own short transaction, no row locks) until
        it has a batch or has read every row; [] when no candidate is left."""
        while not self.exhausted and len(self.candidates) < run.limits.batch_size:
            run.stop_if_due()
            after_at, after_id = self.after or self.phase.first_key
            with run.transaction() as cursor:
                cursor.execute(self.phase.scan_sql, {
                    "after_at": after_at, "after_id": after_id,
                    "chunk": SCAN_CHUNK, "cutoff": run.cutoff, "orphan_sweep_window": run.limits.orphan_sweep_window,
                })
                scanned, found, *last = cursor.fetchone()
            self.candidates += parse_array(found) if found else []
            self.exhausted = scanned < SCAN_CHUNK
            self.after = tuple(last)
        batch, self.candidates = self.candidates[:run.limits.batch_size], self.candidates[run.limits.batch_size:]
        return batch


def wait_for_replicas_if_asked(run: Run) -> None:
    """With max_replica_lag set, let the standbys catch up before a batch: wait (bounded by replica_lag_wait and the
    run's time left, woken by a stop request) while the slowest lags more than that; StopRun when they stay behind,
    or when the run's time or a SIGTERM cancels the lag query."""
    if not run.limits.max_replica_lag:
        return
    wait = wait_for_replicas(
        max_lag=run.limits.max_replica_lag, max_wait=min(run.limits.replica_lag_wait, run.left()),
        should_stop=lambda: run.stop.requested, using=run.using, bounded_transaction=run.transaction,
    )
    run.replica_lag_wait += wait.waited.total_seconds()
    if wait.waited.total_seconds() > 0.01:
        run.log.info(
            "waited for the standbys" if wait.caught_up else "the standbys stayed behind",
            extra={"waited_seconds": round(wait.waited.total_seconds(), 3),
                   "replica_lag_seconds": wait.last_lag and round(wait.last_lag.total_seconds(), 3),
                   "max_replica_lag_seconds": run.limits.max_replica_lag.total_seconds()},
        )
    if wait.stopped:
        raise StopRun(StopReason.STOPPED)
    if not wait.caught_up:
        raise StopRun(StopReason.REPLICA_LAG)


def delete_batch(run: Run, phase: Phase, after: tuple, only_ids: list[str] | None) -> BatchOutcome:
    """One batch, one transaction, one statement: lock the oldest overdue rows after the key `after` (of those
    of `only_ids`), delete them, check that it ran on the lock's session. Counted in the run when it commits."""
    params = batch_params(run, phase, after, only_ids)
    try:
        with run.transaction(batch=True) as cursor:
            cursor.execute(phase.batch_sql, params)
            selected, deleted_cards, deleted_overrides, backend_pid, marker, *last_key = cursor.fetchone()
            run.verify_session(backend_pid, marker)
    except DatabaseError as error:
        if is_data_error(error):
            raise BatchRefused(error, params) from error
        log_batch_failure(run, phase, error, ids_of_failed_batch(run, phase, params))
        raise
    if not selected:
        return BatchOutcome(selected=0, deleted_cards=0, deleted_overrides=0)
    return count_batch(run, phase, BatchOutcome(
        selected=selected, deleted_cards=deleted_cards, deleted_overrides=deleted_overrides, last_key=tuple(last_key),
    ))


def batch_params(run: Run, phase: Phase, after: tuple, only_ids: list[str] | None) -> dict:
    after_at, after_id = after
    return {
        "cutoff": run.cutoff, "batch_size": run.limits.batch_size, "after_at": after_at, "after_id": after_id,
        "only_ids": None if only_ids is None else array_literal(only_ids),
        "skipped_ids": array_literal([c.card_id for c in run.culprits if c.phase == phase.name]),
    }


def ids_of_failed_batch(run: Run, phase: Phase, params: dict) -> list[str]:
    """The ids a batch that failed for an infrastructure reason had selected, for its log line: read again (it
    rolled back whole), on a new session if its own is gone; [] when that fails too."""
    try:
        with run.transaction() as cursor:
            cursor.execute(phase.lock_sql, params)
            batch_ids = cursor.fetchone()[1]
    except (DatabaseError, psycopg.Error, StopRun):
        return []
    return parse_array(batch_ids) if batch_ids else []


def count_batch(run: Run, phase: Phase, outcome: BatchOutcome) -> BatchOutcome:
    """Count a committed batch in the run."""
    run.batches += 1
    if phase.deleted_cards:
        run.counts[phase.deleted_cards] += outcome.deleted_cards
    run.counts[phase.deleted_overrides] += outcome.deleted_overrides
    run.log.debug(
        "batch done",
        extra={"phase": phase.name, "batch_index": run.batches - 1, "selected": outcome.selected,
               "deleted_cards": outcome.deleted_cards, "deleted_overrides": outcome.deleted_overrides},
    )
    return outcome


def isolate_culprits(run: Run, phase: Phase, refusal: BatchRefused) -> BatchOutcome:
    """Redo a batch that failed for a data reason in one transaction, under the same lock, limits, timeouts and stop
    request: lock its rows again (its transaction rolled back whole), log its ids, then delete them in halves,
    each under a savepoint, halving every part that fails until each card that cannot be deleted alone is
    isolated. A culprit costs about 2·log2(n) statements, a batch refused whole about 2n, and never more than one
    transaction. The failed attempt and this transaction together count as one batch."""
    deleted_cards = deleted_overrides = 0
    with run.transaction(batch=True) as cursor:
        cursor.execute(phase.lock_sql, refusal.params)
        selected, batch_ids, row_addresses, backend_pid, marker = cursor.fetchone()
        run.verify_session(backend_pid, marker)
        log_batch_failure(run, phase, refusal.error, parse_array(batch_ids) if batch_ids else [])
        cursor.execute("SELECT unnest(%s::text[]), unnest(%s::tid[])::text", [batch_ids or "{}", row_addresses or "{}"])
        pending = [(cursor.fetchall(), refusal.error)] if selected else []
        while pending:
            cards, error = pending.pop()
            if len(cards) == 1:
                record_culprit(run, phase, cards[0][0], error)
                continue
            half = len(cards) // 2
            for part in (cards[:half], cards[half:]):
                try:
                    with transaction.atomic(using=run.using):  # a savepoint: a failing part undoes itself alone
                        cursor.execute(phase.delete_sql, {
                            # A row address "(page,item)" holds a comma: quoted as an array element.
                            "row_addresses": array_literal([f'"{address}"' for _, address in part]),
                            "ids": array_literal([card_id for card_id, _ in part]), "cutoff": run.cutoff,
                        })
                        part_cards, part_overrides = cursor.fetchone()
                except DatabaseError as part_error:
                    if not is_data_error(part_error):
                        raise
                    pending.append((part, part_error))
                    continue
                deleted_cards += part_cards
                deleted_overrides += part_overrides
    return count_batch(run, phase, BatchOutcome(
        selected=selected or 0, deleted_cards=deleted_cards, deleted_overrides=deleted_overrides
    ))


def stop_if_systemic(run: Run, phase: Phase, outcome: BatchOutcome, error: DatabaseError) -> None:
    """Stop the run, failed, with a one-line reason when the refusals are no longer a few poison cards: every card of
    two consecutive batches refused, or more culprits than MAX_CULPRITS."""
    run.refused_batches = run.refused_batches + 1 if outcome.deleted_cards == 0 else 0
    if run.refused_batches >= 2:
        reason = REFUSED_BATCHES.format(batches=run.refused_batches, count=len(run.culprits), error=first_line(error))
    elif len(run.culprits) > MAX_CULPRITS:
        reason = TOO_MANY_CULPRITS.format(cap=MAX_CULPRITS, count=len(run.culprits), error=first_line(error))
    else:
        return
    run.systemic_failure = reason
    run.log.error(reason, extra={"phase": phase.name, "culprits": len(run.culprits)})
    raise StopRun(StopReason.FAILED)


def record_culprit(run: Run, phase: Phase, card_id: str, error: DatabaseError) -> None:
    message = first_line(error)
    run.culprits.append(Culprit(phase=phase.name, card_id=card_id, error=message))
    if len(run.culprits) <= CULPRITS_LISTED:
        run.log.error(
            "card cannot be deleted: left in place, the run counts as failed",
            extra={"phase": phase.name, "card_id": card_id, "error": message, "sqlstate": sqlstate(error)},
        )


def log_batch_failure(run: Run, phase: Phase, error: DatabaseError, ids: list[str]) -> None:
    """One line for the failure, then the batch's ids as JSON arrays, chunked so that every line stays short."""
    parts = max(1, math.ceil(len(ids) / IDS_PER_LOG_LINE))
    run.log.error(
        "batch failed",
        extra={"phase": phase.name, "batch_index": run.batches, "batch_size": len(ids), "error": first_line(error),
               "sqlstate": sqlstate(error), "batch_id_parts": parts if ids else 0},
    )
    for part in range(parts if ids else 0):
        run.log.error(
            "batch ids",
            extra={"phase": phase.name, "batch_index": run.batches, "part": part + 1, "parts": parts,
                   "batch_ids": ids[part * IDS_PER_LOG_LINE:(part + 1) * IDS_PER_LOG_LINE]},
        )


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error, which Django keeps on the psycopg error it wraps."""
    for candidate in (error, error.__cause__):
        if code := getattr(candidate, "sqlstate", None):
            return code
    return None


def is_data_error(error: DatabaseError) -> bool:
    return (sqlstate(error) or "")[:2] in DATA_ERROR_CLASSES


def first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def array_literal(values: list[str]) -> str:
    """A PostgreSQL array literal: one text parameter however many ids."""
    return "{" + ",".join(values) + "}"


def parse_array(literal: str) -> list[str]:
    return literal.strip("{}").split(",") if literal not in ("{}", "") else []


def milliseconds(duration: timedelta) -> int:
    return max(1, round(duration.total_seconds() * 1000))

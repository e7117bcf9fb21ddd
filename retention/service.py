"""DelistedRetentionJob: physically delete catalog cards Delisted for longer than the retention, in batches, on one
session under the advisory lock, phase by phase (retention.phases). Deletion is irreversible: only rows matching
`status = 'Delisted' AND updated_at < cutoff` are taken, the cutoff computed once from the database clock, and the
DELETE repeats that predicate. The rules: docs/contract.md; how and why: docs/how-it-works.md.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone

import psycopg
from django.conf import settings
from django.db import DatabaseError, OperationalError, transaction
from opentelemetry import trace

from config.logging import first_line
from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.bounds import orphan_ended_within
from retention.limits import PurgeLimits
from retention.locks import PooledSessionError, PoolSaturated, advisory_lock, prove_holder
from retention.metrics import EXPORT_TIMEOUT_SECONDS, RunMetrics
from retention.pacing import ReplicaLagHidden, replica_lag
from retention.phases import CARD_PHASES, PHASES, PROJECTS, PROPERTY_OBJECTS, SCAN_CHUNK, Phase
from retention.preview import preview_purge
from retention.results import DELETED_COUNTS, Culprit, Outcome, PurgeFailed, PurgeResult, StopReason, within_json
from retention.session import SYNC_WAIT_CANCELLED_MESSAGE, JobSession
from retention.statements import STATEMENTS
from retention.spans import current_trace_id, failed, result_attributes, run_attributes, run_span, traced
from retention.stopping import StopRequest, StopRun

LOCK_NAME = "job:scheduled:catalog-delisted-retention"


class UnsupportedLayout(Exception):
    """The catalog's tables are laid out in a way the job cannot keep its rules on: it refuses to start."""


# SQLSTATE classes of errors that belong to the rows, not to the database: data exceptions (22), integrity
# constraint violations (23), PL/pgSQL raise (P0). XX000 (internal_error) is the database's own fault.
DATA_ERROR_CLASSES = ("22", "23", "P0")
UNDEFINED_OBJECT_STATES = ("42P01", "3F000")  # undefined table, invalid schema name
# Errors that a new attempt of the same batch clears: serialization_failure (40001, also a row the batch meets just
# moved to another partition by a committed update) and deadlock_detected (40P01). The failed attempt rolled back
# whole, so a new one deletes nothing twice.
TRANSIENT_STATES = ("40001", "40P01")
BATCH_ATTEMPTS = 5
RETRY_BACKOFF = 0.1  # seconds before the second attempt, doubled before each next one
REPLICA_LAG_POLL = 0.5  # seconds between two looks at the standbys' lag while the run waits for them
IDS_PER_LOG_LINE = 150  # ~6 KB of uuids: every log line stays under 8 KiB
CULPRITS_LISTED = 20  # culprits logged one by one and carried in the result; the rest are only counted
# More culprits than this in one run is no longer a few poison cards but a systemic refusal: the run stops.
MAX_CULPRITS = 5000
SCHEMA_MISSING = "the catalog schema is missing in database {alias!r}: run `manage.py migrate`"
DATABASE_UNREACHABLE = "database {alias!r} is unreachable: {error}"
FOREIGN_PARTITION_REFUSED = (
    "{table} has a foreign table among its partitions, {partition}: a batch could not skip a row locked on the remote "
    "server, nor bound its wait there; purge_delisted does not run on this layout"
)
CONNECTION_LOST = (
    "the run lost its database connection ({error}){unknown_commit}; it opened no other: the server ends the "
    "orphaned session, and frees the advisory lock with it, by {free_by} at the latest"
)
UNKNOWN_COMMIT = (
    "; batch {index} ({phase}, {cards} cards) sent its COMMIT and got no answer: whether it committed is unknown"
)
# A culprit's error and the run's error in the result, as JSON: with 20 culprits stdout stays under 16 KiB.
CULPRIT_ERROR_BYTES, ERROR_JSON_BYTES = 500, 2000
# What ends a run as failed with a one-line error (the job's own refusals say it in their message); StopRun ends it
# with a reason.
REFUSALS = (PooledSessionError, PoolSaturated, ReplicaLagHidden, UnsupportedLayout)
INFRASTRUCTURE_ERRORS = (DatabaseError, psycopg.Error, *REFUSALS)


def purge_delisted_cards(
    limits: PurgeLimits | None = None,
    *,
    dry_run: bool = False,
    now: datetime | None = None,
    stop: StopRequest | None = None,
    on_start: Callable[[Backlog], None] | None = None,
    on_batch: Callable[[int], None] | None = None,
    using: str | None = None,
    run_id: uuid.UUID | None = None,
) -> PurgeResult:
    """Run the job once on database `using` (default: DELISTED_RETENTION_LOCK_DATABASE): take the advisory lock (a
    busy lock is a normal skip), purge the phases. Raises PurgeFailed when the run failed, with what it did before.

    `limits` default to the settings. `now` replaces the database clock in tests only. `stop` ends the run gracefully
    (the command wires it to SIGTERM/SIGINT); `on_start` gets the start count, `on_batch` each batch's deleted cards.
    A dry run takes no lock: it counts what this run would delete. `run_id` is the command's, which opened the run's
    span first."""
    session = JobSession(using=job_database(using), limits=limits or PurgeLimits.from_settings(),
                         stop=stop or StopRequest(), run_id=run_id or uuid.uuid4())
    run = Run()
    metrics = None if dry_run else RunMetrics(log=session.log, max_duration=session.limits.max_duration)
    at_end = None
    # The run's root span (retention.spans): its status is the exit code's, an error when the run fails.
    with run_span(session.run_id) as root:
        root.set_attributes(run_attributes(database=session.using, limits=session.limits, dry_run=dry_run))
        with session.running():
            try:
                if dry_run:
                    refuse_unsupported_layout(session)
                    run.cutoff = compute_cutoff(session, session.limits.retention, now)
                    result = run_result(session, run, **preview_purge(session, cutoff=run.cutoff), dry_run=True)
                else:
                    result, at_end = locked_run(session, run, now, metrics, on_start or (lambda backlog: None),
                                                on_batch or (lambda deleted: None))
            except StopRun as stopped:  # before anything was locked: the wait for a pooler's server, the dry run
                result = run_result(session, run, stopped.reason, dry_run=dry_run)
            except INFRASTRUCTURE_ERRORS as error:
                result = run_result(session, run, StopReason.FAILED, error=describe_failure(error, session, run),
                                    dry_run=dry_run)
        if metrics:
            metrics.run_finished(result, at_end, timeout=session.stop.exit_wait(EXPORT_TIMEOUT_SECONDS))
        root.set_attributes(result_attributes(result))
        if result.outcome is Outcome.FAILED:
            raise PurgeFailed(result)
        return result


def job_database(using: str | None) -> str:
    """The database alias a run uses: `using`, else DELISTED_RETENTION_LOCK_DATABASE. An empty alias is a mistake,
    not a request for the default."""
    return settings.DELISTED_RETENTION_LOCK_DATABASE if using is None else using


@dataclass
class Run:
    """What the batch loop counts as it goes; the run's limits, clock and log are its session's."""

    cutoff: datetime | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DELETED_COUNTS, 0))
    batches: int = 0
    batch_retries: int = 0
    culprits: list[Culprit] = field(default_factory=list)
    refused_batches: int = 0  # consecutive batches of which every card was a culprit
    systemic_failure: str | None = None
    replica_lag_wait: float = 0.0
    unknown_commit: dict | None = None  # the batch whose COMMIT got no answer: its index, phase and cards


def run_result(session: JobSession, run: Run, stop_reason: StopReason, *, has_more: bool | None = None,
               error: str | None = None, dry_run: bool = False, **fields) -> PurgeResult:
    """The run's result: the one place its outcome is decided. It fails on an infrastructure `error`, on culprits
    (also when it was then stopped: cron must hear of them), and on a commit its synchronous standby never confirmed
    once the run's time ran out (cron must hear of a standby gone). A run that stopped on a limit or completed is
    judged by what it left (`has_more`): unknown is not "nothing left"."""
    culprits = len(run.culprits)
    if error is None and culprits:
        error = run.systemic_failure or (f"{culprits} card(s) cannot be deleted and were left in place; the first "
                                         f"{min(culprits, CULPRITS_LISTED)} are logged with their id and error")
    elif error is None and session.unconfirmed_commit and stop_reason is StopReason.MAX_DURATION:
        stop_reason, error = StopReason.FAILED, SYNC_WAIT_CANCELLED_MESSAGE
    if stop_reason is StopReason.FAILED or culprits:
        outcome = Outcome.FAILED
    elif stop_reason in (StopReason.STOPPED, StopReason.LOCK_BUSY):
        outcome = Outcome(stop_reason)  # the stop reasons that are an outcome by themselves
    else:
        outcome = Outcome.COMPLETED if has_more is False else Outcome.HAS_MORE
    return PurgeResult(
        run_id=session.run_id, cutoff=run.cutoff, stop_reason=stop_reason, outcome=outcome, has_more=has_more,
        culprits=tuple(replace(culprit, error=within_json(culprit.error, CULPRIT_ERROR_BYTES))
                       for culprit in run.culprits[:CULPRITS_LISTED]),
        culprit_count=culprits, uncertain_cards=run.unknown_commit["cards"] if run.unknown_commit else 0,
        replica_lag_wait_seconds=round(run.replica_lag_wait, 3), error=error and within_json(error, ERROR_JSON_BYTES),
        dry_run=dry_run, duration_seconds=round(time.monotonic() - session.started, 3), trace_id=current_trace_id(),
        # A dry run's fields are its own.
        **{"batches_processed": run.batches, "batch_retries": run.batch_retries, **run.counts, **fields},
    )


def refuse_unsupported_layout(session: JobSession) -> None:
    """UnsupportedLayout when a table the job deletes from has a foreign table among its partitions. Any other
    partitioning the job runs on (docs/how-it-works.md, "A partitioned catalog")."""
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["foreign partition"])
        found = cursor.fetchone()
    if found:
        table, partition = found
        raise UnsupportedLayout(FOREIGN_PARTITION_REFUSED.format(table=table, partition=partition))


def describe_failure(error: Exception, session: JobSession, run: Run) -> str:
    if isinstance(error, REFUSALS):
        return str(error)
    if session.lost:
        free_by = datetime.now(timezone.utc) + orphan_ended_within(session.limits)
        return CONNECTION_LOST.format(
            error=first_line(error), free_by=free_by.isoformat(timespec="seconds"),
            unknown_commit=UNKNOWN_COMMIT.format(**run.unknown_commit) if run.unknown_commit else "",
        )
    return database_problem(error, session.using)


def database_problem(error: Exception, using: str) -> str:
    """A database error in one line, a missing schema and an unreachable server in an operator's words."""
    if sqlstate(error) in UNDEFINED_OBJECT_STATES:
        return SCHEMA_MISSING.format(alias=using)
    if sqlstate(error) is None and isinstance(error, OperationalError):
        return DATABASE_UNREACHABLE.format(alias=using, error=first_line(error))
    return first_line(error)


def locked_run(
    session: JobSession, run: Run, now, metrics: RunMetrics, on_start, on_batch
) -> tuple[PurgeResult, Backlog | None]:
    """The run under the advisory lock; returns its result and the backlog counted at its end."""
    with traced("advisory_lock", {"retention.lock": LOCK_NAME}), advisory_lock(session, LOCK_NAME) as acquired:
        if not acquired:
            session.log.warning("purge skipped: the advisory lock is held by another run", extra={"lock": LOCK_NAME})
            return run_result(session, run, StopReason.LOCK_BUSY), None
        refuse_unsupported_layout(session)
        at_start = None
        try:
            run.cutoff = compute_cutoff(session, session.limits.retention, now)
            # What the run starts from; the held-back projects are counted at the end, where they are reported.
            with traced("count_backlog", {"retention.count": "start"}):
                at_start = measure_backlog(session, cutoff=run.cutoff, count_held_back=False, in_chunks=True)
            metrics.run_started(at_start)
            session.log.info(
                "purge started",
                extra={"cutoff": run.cutoff.isoformat(), "database": session.using,
                       "batch_size": session.limits.batch_size,
                       "overdue_property_objects": at_start.property_objects.overdue,
                       "overdue_projects": at_start.projects.overdue},
            )
            on_start(at_start)
            run_phases(session, run, on_batch)
            stop_reason = StopReason.COMPLETED
        except StopRun as stopped:
            stop_reason = stopped.reason
        if at_start is None:  # a SIGTERM or the run's time ended the start count
            return run_result(session, run, stop_reason), None
        try:
            with traced("count_backlog", {"retention.count": "end"}):
                at_end = measure_backlog(session, cutoff=run.cutoff, within_window_from=at_start, in_chunks=True)
        except StopRun:
            at_end = None  # what is left stays unknown
        result = run_result(
            session, run, stop_reason,
            has_more=at_end and overdue_left(at_end, run.culprits),
            projects_held_back=at_end and at_end.projects.held_back,
            overdue_property_object_cards=at_start.property_objects.overdue,
            overdue_project_cards=at_start.projects.overdue,
        )
    session.log.info("purge completed", extra=summary_fields(result))
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
    fields.pop("run_id")  # on every line of the run already (RunLog), as the trace id is when tracing is on
    fields.pop("trace_id")
    fields["culprits"] = [culprit.card_id for culprit in result.culprits]
    return fields


def run_phases(session: JobSession, run: Run, on_batch: Callable[[int], None]) -> None:
    """Every phase in turn until it runs dry; StopRun ends the loop between batches (or the batch in flight)."""
    last_batch_seconds = None
    for phase in PHASES:
        scan = CandidateScan(phase, after=phase.first_key) if phase.scan_sql else None
        resume_after = last_key = phase.first_key  # where a batch resumes (retention.phases, Phase), where it got
        with traced("phase", {"retention.phase": phase.name}):
            while True:
                if last_batch_seconds is not None:
                    limits = session.limits  # never over the longest pause, which the server's idle bound allows for
                    pause = min(limits.batch_pause.total_seconds() + limits.batch_pause_factor * last_batch_seconds,
                                limits.longest_pause.total_seconds())
                    with traced("pause", {"retention.pause_seconds": pause}) if pause else nullcontext():
                        session.sleep(pause)
                session.check()
                if run.batches >= session.limits.max_batches:
                    raise StopRun(StopReason.MAX_BATCHES)
                wait_for_replicas(session, run)
                only_ids = scan.next_candidates(session, run) if scan else None
                if only_ids == []:
                    break  # the scan found no candidate left
                started = time.monotonic()
                with traced("batch", {"retention.phase": phase.name, "retention.batch_index": run.batches}) as span:
                    outcome = delete_batch(session, run, phase, resume_after, only_ids)
                    span.set_attributes({"retention.selected": outcome.selected, "retention.retries": outcome.retries,
                                         "retention.deleted_cards": outcome.deleted_cards,
                                         "retention.deleted_overrides": outcome.deleted_overrides})
                    if not outcome.selected:  # the phase ran dry: not a batch the result counts
                        span.update_name("empty_batch")
                # A redone batch (culprits) has no last key: the next resumes as it did, its culprits skipped.
                if outcome.last_key:
                    resume_after, last_key = last_key, outcome.last_key
                # The pause rests the database after work; an empty selection (a phase ran dry) did none.
                last_batch_seconds = time.monotonic() - started if outcome.selected else None
                if outcome.selected:
                    on_batch(outcome.deleted_cards)
                # A phase with a scan runs dry when its candidates are all taken, any other on a short batch.
                if (scan.done if scan else outcome.selected < session.limits.batch_size):
                    break


@dataclass
class CandidateScan:
    """How far a phase's scan for candidates (Phase.scan_sql) has got, and the candidates it found that no batch has
    taken yet."""

    phase: Phase
    after: tuple  # the key of the last row scanned
    exhausted: bool = False
    candidates: list[str] = field(default_factory=list)

    @property
    def done(self) -> bool:
        return self.exhausted and not self.candidates

    def next_candidates(self, session: JobSession, run: Run) -> list[str]:
        """Up to a batch of candidates, scanning on in chunks (each its own short transaction, no row locks) until
        it has a batch or has read every row; [] when no candidate is left."""
        batch_size = session.limits.batch_size
        while not self.exhausted and len(self.candidates) < batch_size:
            session.check()
            after_at, after_id = self.after
            with traced("scan_chunk", {"retention.phase": self.phase.name}), session.transaction() as cursor:
                cursor.execute(self.phase.scan_sql, {
                    "after_at": after_at, "after_id": after_id, "chunk": SCAN_CHUNK, "cutoff": run.cutoff,
                    "orphan_sweep_window": session.limits.orphan_sweep_window,
                })
                scanned, found, *last = cursor.fetchone()
            self.candidates += parse_array(found)
            self.exhausted = scanned < SCAN_CHUNK
            self.after = tuple(last)
        batch, self.candidates = self.candidates[:batch_size], self.candidates[batch_size:]
        return batch


def wait_for_replicas(session: JobSession, run: Run) -> None:
    """With max_replica_lag set, let the standbys catch up before a batch: poll the slowest one's lag
    (retention.pacing) until it is within max_replica_lag. StopRun when they stay behind for longer than
    replica_lag_wait, and on a stop or at the run's end."""
    max_lag, started = session.limits.max_replica_lag, time.monotonic()
    if not max_lag:
        return
    max_wait = min(session.limits.replica_lag_wait, session.left()).total_seconds()
    with traced("replica_lag_wait", {"retention.limit.max_replica_lag": max_lag.total_seconds()}):
        while (lag := replica_lag(session)) is not None and lag > max_lag:
            waited = time.monotonic() - started
            if waited >= max_wait or not session.sleep(min(REPLICA_LAG_POLL, max_wait - waited)):
                break
    waited, caught_up = time.monotonic() - started, lag is None or lag <= max_lag
    run.replica_lag_wait += waited
    if waited > 0.01:
        session.log.info(
            "waited for the standbys" if caught_up else "the standbys stayed behind",
            extra={"waited_seconds": round(waited, 3), "replica_lag_seconds": lag and round(lag.total_seconds(), 3),
                   "max_replica_lag_seconds": max_lag.total_seconds()},
        )
    session.check()  # a stop, or the run's time, ended the wait
    if not caught_up:
        raise StopRun(StopReason.REPLICA_LAG)


@dataclass(frozen=True)
class BatchOutcome:
    selected: int
    deleted_cards: int
    deleted_overrides: int
    last_key: tuple | None = None  # the key of the batch's last row: where the phase's next batch resumes
    retries: int = 0  # attempts that failed on a transient error before this one


def delete_batch(
    session: JobSession, run: Run, phase: Phase, after: tuple, only_ids: list[str] | None
) -> BatchOutcome:
    """One batch, one transaction, one statement: lock the oldest overdue rows after the key `after` (of those
    of `only_ids`), delete them, prove it ran on the lock's session. Counted in the run when it commits. A refusal
    for a data reason redoes it in parts to isolate its culprits, the refusal the batch span's error. A transient
    error (TRANSIENT_STATES), in the batch or its isolation, runs it again, up to BATCH_ATTEMPTS in all, skipping
    the culprits found so far, before it fails the run."""
    after_at, after_id = after
    params = {
        "cutoff": run.cutoff, "batch_size": session.limits.batch_size, "after_at": after_at, "after_id": after_id,
        "only_ids": None if only_ids is None else array_literal(only_ids),
    }
    for attempt in range(1, BATCH_ATTEMPTS + 1):
        params["skipped_ids"] = array_literal([c.card_id for c in run.culprits if c.phase == phase.name])
        deleted_cards = None
        try:
            try:
                with session.transaction(writes=True) as cursor:
                    cursor.execute(phase.batch_sql, params)
                    selected, deleted_cards, deleted_overrides, backend_pid, marker, *last_key = cursor.fetchone()
                    prove_holder(session, backend_pid, marker)
            except DatabaseError as error:
                if not is_data_error(error):
                    raise
                failed(trace.get_current_span(), error)
                outcome = isolate_culprits(session, run, phase, error, params)
                stop_if_systemic(session, run, phase, outcome, error)
                return outcome
            break
        except DatabaseError as error:
            if sqlstate(error) in TRANSIENT_STATES and attempt < BATCH_ATTEMPTS and not session.lost:
                wait_to_retry(session, run, phase, error, attempt)
                continue
            if session.lost and deleted_cards is not None:  # the statement answered, its COMMIT did not
                run.unknown_commit = {"index": run.batches, "phase": phase.name, "cards": deleted_cards}
            log_batch_failure(session, run, phase, error, ids_of_failed_batch(session, phase, params))
            raise
    run.refused_batches = 0
    if not selected:
        return BatchOutcome(selected=0, deleted_cards=0, deleted_overrides=0, retries=attempt - 1)
    return count_batch(session, run, phase, BatchOutcome(
        selected=selected, deleted_cards=deleted_cards, deleted_overrides=deleted_overrides, last_key=tuple(last_key),
        retries=attempt - 1,
    ))


def wait_to_retry(session: JobSession, run: Run, phase: Phase, error: DatabaseError, attempt: int) -> None:
    """After a batch's failed `attempt`: say so (log line, an event on the batch's span), then wait the backoff;
    StopRun when a stop or the run's time comes meanwhile."""
    run.batch_retries += 1
    backoff = RETRY_BACKOFF * 2 ** (attempt - 1)
    message = first_line(error)
    trace.get_current_span().add_event("retry", {"attempt": attempt, "sqlstate": sqlstate(error), "error": message})
    session.log.warning(
        "batch retried after a transient error",
        extra={"phase": phase.name, "batch_index": run.batches, "attempt": attempt, "sqlstate": sqlstate(error),
               "error": message, "backoff_seconds": backoff},
    )
    session.sleep(backoff)
    session.check()


def ids_of_failed_batch(session: JobSession, phase: Phase, params: dict) -> list[str]:
    """The ids a batch that failed for an infrastructure reason had selected, for its log line: read again (it
    rolled back whole); [] when that fails too, or the session is lost (no other is opened)."""
    try:
        with session.transaction() as cursor:
            cursor.execute(phase.lock_sql, params)
            batch_ids = cursor.fetchone()[0]
    except (DatabaseError, psycopg.Error, StopRun):
        return []
    return parse_array(batch_ids)


def count_batch(session: JobSession, run: Run, phase: Phase, outcome: BatchOutcome) -> BatchOutcome:
    """Count a committed batch in the run."""
    run.batches += 1
    if phase.deleted_cards:
        run.counts[phase.deleted_cards] += outcome.deleted_cards
    run.counts[phase.deleted_overrides] += outcome.deleted_overrides
    session.log.debug(
        "batch done",
        extra={"phase": phase.name, "batch_index": run.batches - 1, "selected": outcome.selected,
               "deleted_cards": outcome.deleted_cards, "deleted_overrides": outcome.deleted_overrides,
               "retries": outcome.retries},
    )
    return outcome


def isolate_culprits(session: JobSession, run: Run, phase: Phase, error: DatabaseError, params: dict) -> BatchOutcome:
    """Redo a batch that failed for a data reason in one transaction, under the same lock, limits and session:
    lock its rows again (its transaction rolled back whole), log its ids, then run the batch's own statement on
    halves of them, each under a savepoint, halving every part that fails until each card that cannot be deleted
    alone is isolated. The failed attempt and this transaction together count as one batch."""
    deleted_cards = deleted_overrides = 0
    with traced("isolate_culprits", {"retention.phase": phase.name}), session.transaction(writes=True) as cursor:
        cursor.execute(phase.lock_sql, params)
        batch_ids, backend_pid, marker = cursor.fetchone()
        prove_holder(session, backend_pid, marker)
        batch = parse_array(batch_ids)
        log_batch_failure(session, run, phase, error, batch)
        pending = [(batch, error)] if batch else []
        while pending:
            ids, error = pending.pop()
            if len(ids) == 1:
                record_culprit(session, run, phase, ids[0], error)
                continue
            half = len(ids) // 2
            for part in (ids[:half], ids[half:]):
                try:
                    with transaction.atomic(using=session.using):  # a savepoint: a failing part undoes itself
                        cursor.execute(phase.batch_sql, params | {"only_ids": array_literal(part)})
                        _, part_cards, part_overrides, *_ = cursor.fetchone()
                except DatabaseError as part_error:
                    if not is_data_error(part_error):
                        raise
                    pending.append((part, part_error))
                    continue
                deleted_cards += part_cards
                deleted_overrides += part_overrides
    return count_batch(session, run, phase, BatchOutcome(
        selected=len(batch), deleted_cards=deleted_cards, deleted_overrides=deleted_overrides
    ))


def stop_if_systemic(
    session: JobSession, run: Run, phase: Phase, outcome: BatchOutcome, error: DatabaseError
) -> None:
    """Stop the run, failed, with a one-line reason when the refusals are no longer a few poison cards: every card of
    two consecutive batches refused, or more culprits than MAX_CULPRITS."""
    run.refused_batches = run.refused_batches + 1 if outcome.deleted_cards == 0 else 0
    culprits = len(run.culprits)
    if run.refused_batches >= 2:
        reason = f"every card of {run.refused_batches} consecutive batches was refused ({culprits} culprits)"
    elif culprits > MAX_CULPRITS:
        reason = f"more than {MAX_CULPRITS} cards cannot be deleted ({culprits} culprits)"
    else:
        return
    reason += f": {first_line(error)}; run stopped"
    run.systemic_failure = reason
    session.log.error(reason, extra={"phase": phase.name, "culprits": culprits})
    raise StopRun(StopReason.FAILED)


def record_culprit(session: JobSession, run: Run, phase: Phase, card_id: str, error: DatabaseError) -> None:
    message = first_line(error)
    run.culprits.append(Culprit(phase=phase.name, card_id=card_id, error=message))
    trace.get_current_span().add_event("culprit", {"card_id": card_id, "error": message})  # on isolate_culprits
    if len(run.culprits) <= CULPRITS_LISTED:
        session.log.error(
            "card cannot be deleted: left in place, the run counts as failed",
            extra={"phase": phase.name, "card_id": card_id, "error": message, "sqlstate": sqlstate(error)},
        )


def log_batch_failure(
    session: JobSession, run: Run, phase: Phase, error: DatabaseError, ids: list[str]
) -> None:
    """One line for the failure, then the batch's ids as JSON arrays, chunked so that every line stays short."""
    parts = math.ceil(len(ids) / IDS_PER_LOG_LINE)
    session.log.error(
        "batch failed",
        extra={"phase": phase.name, "batch_index": run.batches, "batch_size": len(ids), "error": first_line(error),
               "sqlstate": sqlstate(error), "batch_id_parts": parts},
    )
    for part in range(parts):
        session.log.error(
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


def array_literal(values: list[str]) -> str:
    """A PostgreSQL array literal: one text parameter however many ids."""
    return "{" + ",".join(values) + "}"


def parse_array(literal: str | None) -> list[str]:
    """The elements of an array literal, as array_agg(...)::text gives it: NULL (no row) too is no element."""
    return literal.strip("{}").split(",") if literal not in (None, "{}", "") else []

"""DelistedRetentionJob, the run's order: physically delete catalog cards Delisted for longer than the retention, in
batches, on one session under the advisory lock, phase by phase. Deletion is irreversible: only rows matching
`status = 'Delisted' AND updated_at < cutoff` are taken, the cutoff computed once from the database clock, and the
DELETE repeats that predicate. The rules: docs/contract.md; how and why: docs/how-it-works.md.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
from django.conf import settings
from django.db import DatabaseError

from config.logging import first_line
from retention import metrics
from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.batches import delete_batch
from retention.limits import PurgeLimits
from retention.locks import PooledSessionError, advisory_lock
from retention.pacing import ReplicaLagHidden, wait_for_replicas
from retention.phases import (
    CARD_PHASES, PHASES, PROJECTS, PROPERTY_OBJECTS, CandidateScan, UnsupportedLayout, refuse_unsupported_layout,
)
from retention.preview import preview_purge
from retention.results import PurgeResult, Run, StopReason, database_problem
from retention.session import JobSession, StopRequest, StopRun
from retention.spans import traced

LOCK_NAME = "job:scheduled:catalog-delisted-retention"
# What ends a run as failed with a one-line error; the job's own refusals say it in their message.
REFUSALS = (PooledSessionError, ReplicaLagHidden, UnsupportedLayout)
INFRASTRUCTURE_ERRORS = (DatabaseError, psycopg.Error, *REFUSALS)
CONNECTION_LOST = (
    "the run lost its database connection ({error}){unknown_commit}; it opened no other: the server ends the "
    "orphaned session, and frees the advisory lock with it, by {free_by} at the latest"
)
UNKNOWN_COMMIT = (
    "; batch {index} ({phase}, {cards} cards) sent its COMMIT and got no answer: whether it committed is unknown"
)


def purge_delisted_cards(
    limits: PurgeLimits | None = None, *, dry_run: bool = False, now: datetime | None = None,
    stop: StopRequest | None = None, progress=None, using: str | None = None, run_id: uuid.UUID | None = None,
) -> PurgeResult:
    """Run the job once on database `using` (default: DELISTED_RETENTION_LOCK_DATABASE) and return its result, a
    failure's included, with what it did before (committed batches are final). `limits` default to the settings;
    `now` replaces the database clock in tests only; `stop` ends the run before its next batch; `progress` (tqdm's
    reset and update) gets the overdue cards, then each batch's. A dry run takes no lock and deletes nothing."""
    session = JobSession(using=job_database(using), limits=limits or PurgeLimits.from_settings(),
                         stop=stop or StopRequest(), run_id=run_id or uuid.uuid4())
    run, at_end = Run(session.run_id, session.started, dry_run=dry_run), None
    with session:
        try:
            if dry_run:
                refuse_unsupported_layout(session)
                run.cutoff = compute_cutoff(session, session.limits.retention, now)
                result = run.result(**preview_purge(session, cutoff=run.cutoff))
            else:
                result, at_end = locked_run(session, run, now, progress)
        except INFRASTRUCTURE_ERRORS as error:
            result = run.result(StopReason.FAILED, error=describe_failure(error, session, run))
    if not dry_run:
        metrics.export_run(result, at_end, max_duration=session.limits.max_duration, log=session.log)
    return result


def job_database(using: str | None) -> str:
    """The database alias a run uses: `using`, else DELISTED_RETENTION_LOCK_DATABASE. An empty alias is a mistake,
    not a request for the default."""
    return settings.DELISTED_RETENTION_LOCK_DATABASE if using is None else using


def locked_run(session: JobSession, run: Run, now, progress) -> tuple[PurgeResult, Backlog | None]:
    """The run under the advisory lock (a busy one is a skip): counts, phases, counts; its result and end count."""
    with traced("advisory_lock", {"retention.lock": LOCK_NAME}), advisory_lock(session, LOCK_NAME) as acquired:
        if not acquired:
            session.log.warning("purge skipped: the advisory lock is held by another run", extra={"lock": LOCK_NAME})
            return run.result(StopReason.LOCK_BUSY), None
        refuse_unsupported_layout(session)
        run.cutoff = compute_cutoff(session, session.limits.retention, now)
        # What the run starts from; the held-back projects are counted at the end, where they are reported.
        with traced("count_backlog", {"retention.count": "start"}):
            at_start = measure_backlog(session, cutoff=run.cutoff, count_held_back=False, in_chunks=True)
        metrics.export_backlog(at_start, log=session.log)
        session.log.info("purge started", extra={
            "cutoff": run.cutoff.isoformat(), "database": session.using, "batch_size": session.limits.batch_size,
            "overdue_property_objects": at_start.property_objects.overdue,
            "overdue_projects": at_start.projects.overdue,
        })
        if progress is not None:
            progress.reset(total=at_start.overdue_cards)
        try:
            stop_reason = purge_phases(session, run, progress)
        except StopRun as stopped:
            stop_reason = stopped.reason
        with traced("count_backlog", {"retention.count": "end"}):
            at_end = measure_backlog(session, cutoff=run.cutoff, within_window_from=at_start, in_chunks=True)
        result = run.result(
            stop_reason, has_more=overdue_left(at_end, run), projects_held_back=at_end.projects.held_back,
            overdue_property_object_cards=at_start.property_objects.overdue,
            overdue_project_cards=at_start.projects.overdue,
        )
    session.log.info("purge completed", extra=result.log_fields())
    return result, at_end


def purge_phases(session: JobSession, run: Run, progress) -> StopReason:
    """Every phase in turn until it runs dry. Before each batch, after the pause: the stop request and the run's time
    (StopRun), max_batches and the standbys; after it, a systemic refusal. Returns why the run ended."""
    last_batch_seconds = None
    for phase in PHASES:
        scan = CandidateScan(phase, after=phase.first_key) if phase.scan_sql else None
        resume_after = last_key = phase.first_key  # where a batch resumes (retention.phases, Phase), where it got
        with traced("phase", {"retention.phase": phase.name}):
            while True:
                if last_batch_seconds is not None:  # never over the longest pause, which the server's bounds allow
                    limits = session.limits
                    pause = min(limits.batch_pause.total_seconds() + limits.batch_pause_factor * last_batch_seconds,
                                limits.longest_pause.total_seconds())
                    if pause:
                        with traced("pause", {"retention.pause_seconds": pause}):
                            session.sleep(pause)
                session.check()
                if run.batches >= session.limits.max_batches:
                    return StopReason.MAX_BATCHES
                if not wait_for_replicas(session, run):
                    session.check()  # a stop or the run's time ended the wait
                    return StopReason.REPLICA_LAG
                only_ids = scan.next_candidates(session, run.cutoff) if scan else None
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
                if run.systemic_failure:
                    return StopReason.FAILED
                if outcome.last_key:
                    resume_after, last_key = last_key, outcome.last_key
                # The pause rests the database after work; an empty selection (a phase ran dry) did none.
                last_batch_seconds = time.monotonic() - started if outcome.selected else None
                if outcome.selected and progress is not None:
                    progress.update(outcome.deleted_cards)
                # A phase with a scan runs dry when its candidates are all taken, any other on a short batch.
                if (scan.exhausted and not scan.candidates) if scan else outcome.selected < session.limits.batch_size:
                    break
    return StopReason.COMPLETED


def overdue_left(backlog: Backlog, run: Run) -> bool:
    """Whether overdue cards remain that a later run can delete: those skipped because another transaction held
    them, or left by a limit. Culprits and projects held back by a remaining object do not count."""
    culprit_cards = {phase.name: sum(c.phase == phase.name for c in run.culprits) for phase in CARD_PHASES}
    return (
        backlog.property_objects.overdue > culprit_cards[PROPERTY_OBJECTS.name]
        or backlog.projects.overdue - backlog.projects.held_back > culprit_cards[PROJECTS.name]
    )


def describe_failure(error: Exception, session: JobSession, run: Run) -> str:
    """The failed run's one line: the job's own refusal, a lost connection (naming the batch whose COMMIT got no
    answer), or the database's error."""
    if isinstance(error, REFUSALS):
        return str(error)
    if not session.lost:
        return database_problem(error, session.using)
    if session.commit_unknown and run.in_flight:
        phase, cards = run.in_flight
        run.unknown_commit = {"index": run.batches, "phase": phase, "cards": cards}
    # The server ends the orphan, its lock with it, after the user timeout, one keepalive interval and the check's 1 s.
    orphan_ended_within = session.limits.dead_peer_timeout * 7 / 6 + timedelta(seconds=1)
    free_by = (datetime.now(timezone.utc) + orphan_ended_within).isoformat(timespec="seconds")
    unknown_commit = UNKNOWN_COMMIT.format(**run.unknown_commit) if run.unknown_commit else ""
    return CONNECTION_LOST.format(error=first_line(error), unknown_commit=unknown_commit, free_by=free_by)

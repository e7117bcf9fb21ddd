"""A batch: one transaction, one statement (its phase's batch_sql), run again on a transient error, redone in parts
when refused for a data reason (retention.culprits). How and why: docs/how-it-works.md, "The batches".
"""

from dataclasses import dataclass

from django.db import DatabaseError
from opentelemetry import trace

from config.logging import first_line
from retention.culprits import is_data_error, isolate_culprits, log_batch_failure
from retention.locks import prove_holder
from retention.phases import Phase, array_literal, parse_array
from retention.results import Run, sqlstate
from retention.session import JobSession
from retention.spans import failed

# Errors that a new attempt of the same batch clears: serialization_failure (40001, also a row the batch meets just
# moved to another partition by a committed update) and deadlock_detected (40P01). The failed attempt rolled back
# whole, so a new one deletes nothing twice.
TRANSIENT_STATES = ("40001", "40P01")
BATCH_ATTEMPTS = 5
RETRY_BACKOFF = 0.1  # seconds before the second attempt, doubled before each next one


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
    """Lock the oldest overdue rows after the key `after` (of those of `only_ids`), delete them, prove it ran on the
    lock's session; counted in the run when it commits. A transient error (TRANSIENT_STATES), in the batch or its
    culprit search, runs it again, up to BATCH_ATTEMPTS in all, skipping the culprits found so far; any other error
    fails the run, the batch's ids logged."""
    after_at, after_id = after
    params = {
        "cutoff": run.cutoff, "batch_size": session.limits.batch_size, "after_at": after_at, "after_id": after_id,
        "only_ids": None if only_ids is None else array_literal(only_ids),
    }
    for attempt in range(1, BATCH_ATTEMPTS + 1):
        params["skipped_ids"] = array_literal([c.card_id for c in run.culprits if c.phase == phase.name])
        try:
            return attempt_batch(session, run, phase, params, retries=attempt - 1)
        except DatabaseError as error:
            if sqlstate(error) not in TRANSIENT_STATES or attempt == BATCH_ATTEMPTS or session.lost:
                log_batch_failure(session, run, phase, error, ids_of_failed_batch(session, phase, params))
                raise
            wait_to_retry(session, run, phase, error, attempt)


def attempt_batch(session: JobSession, run: Run, phase: Phase, params: dict, *, retries: int) -> BatchOutcome:
    """One attempt: the batch statement, or, refused for a data reason, its culprit search (the refusal the batch
    span's error)."""
    try:
        with session.transaction(writes=True) as cursor:
            cursor.execute(phase.batch_sql, params)
            selected, cards, overrides, backend_pid, marker, *last_key = cursor.fetchone()
            prove_holder(session, backend_pid, marker)
            run.in_flight = (phase.name, cards)
    except DatabaseError as error:
        if not is_data_error(error):
            raise
        failed(trace.get_current_span(), error)
        # Redone, it has no last key: the next batch resumes as this one did, its culprits skipped.
        (selected, cards, overrides), last_key = isolate_culprits(session, run, phase, error, params), None
    run.in_flight = None
    if not selected:  # the phase ran dry: not a batch the run counts
        return BatchOutcome(selected=0, deleted_cards=0, deleted_overrides=0, retries=retries)
    run.batches += 1
    if phase.deleted_cards:
        run.counts[phase.deleted_cards] += cards
    run.counts[phase.deleted_overrides] += overrides
    session.log.debug("batch done", extra={"phase": phase.name, "batch_index": run.batches - 1, "selected": selected,
                                           "deleted_cards": cards, "deleted_overrides": overrides, "retries": retries})
    return BatchOutcome(selected, cards, overrides, tuple(last_key) if last_key else None, retries)


def wait_to_retry(session: JobSession, run: Run, phase: Phase, error: DatabaseError, attempt: int) -> None:
    """After a batch's failed `attempt`: say so (log line, an event on the batch's span), then wait the backoff;
    StopRun when a stop or the run's time comes meanwhile."""
    run.batch_retries += 1
    backoff, retry = RETRY_BACKOFF * 2 ** (attempt - 1), {"attempt": attempt, "sqlstate": sqlstate(error),
                                                          "error": first_line(error)}
    trace.get_current_span().add_event("retry", retry)
    session.log.warning("batch retried after a transient error",
                        extra={"phase": phase.name, "batch_index": run.batches, **retry, "backoff_seconds": backoff})
    session.sleep(backoff)
    session.check()


def ids_of_failed_batch(session: JobSession, phase: Phase, params: dict) -> list[str]:
    """The ids a batch that failed had selected, for its log line: read again (it rolled back whole); [] when that
    fails too, or the connection is lost (the session opens no other)."""
    if session.lost:
        return []
    try:
        with session.transaction() as cursor:
            cursor.execute(phase.lock_sql, params)
            return parse_array(cursor.fetchone()[0])
    except DatabaseError:
        return []

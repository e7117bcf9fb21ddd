"""Culprit isolation: a batch refused for a data reason (a trigger raising, a constraint) is redone in parts until each
card that cannot be deleted alone is found and left in place, and the rest is deleted. A refusal of every card is not
a few poison cards but a systemic one, recognised in a few statements: the run fails. Why: docs/how-it-works.md,
"The batches".
"""

import math

from django.db import DatabaseError, transaction
from opentelemetry import trace

from config.logging import first_line
from retention.locks import prove_holder
from retention.phases import Phase, array_literal, parse_array
from retention.results import CULPRITS_LISTED, Culprit, Run, sqlstate
from retention.session import JobSession
from retention.spans import traced

# SQLSTATE classes of errors that belong to the rows, not to the database: data exceptions (22), integrity
# constraint violations (23), PL/pgSQL raise (P0). XX000 (internal_error) is the database's own fault.
DATA_ERROR_CLASSES = ("22", "23", "P0")
# One culprit among any number of cards lets a part through at every halving (10,000 cards are 14 deep): a search
# whose first this many parts are all refused meets a refusal of (nearly) every card of its batch.
SYSTEMIC_PARTS = 32
MAX_CULPRITS = 5000  # more in one run is no longer a few poison cards either, and each weighs on every next batch
IDS_PER_LOG_LINE = 150  # ~6 KB of uuids: every log line stays under 8 KiB


def is_data_error(error: DatabaseError) -> bool:
    return (sqlstate(error) or "")[:2] in DATA_ERROR_CLASSES


def isolate_culprits(
    session: JobSession, run: Run, phase: Phase, error: DatabaseError, params: dict
) -> tuple[int, int, int]:
    """Redo a refused batch in one transaction, under the same lock and session: lock its rows again (its transaction
    rolled back whole), log its ids, then run the batch's own statement on halves of them, each under a savepoint,
    halving every part that fails. A stop or the run's deadline is checked before each part; a systemic refusal ends
    the search (`run.systemic_failure`). Returns the rows selected, the cards and overrides deleted."""
    deleted_cards = deleted_overrides = tried = went_through = 0
    with traced("isolate_culprits", {"retention.phase": phase.name}), session.transaction(writes=True) as cursor:
        cursor.execute(phase.lock_sql, params)
        batch_ids, backend_pid, marker = cursor.fetchone()
        prove_holder(session, backend_pid, marker)
        batch = parse_array(batch_ids)
        log_batch_failure(session, run, phase, error, batch)
        pending = [(batch, error)] if batch else []
        after_go_through = None  # whether the cards after the batch do: asked once no part of it has
        while pending:
            if tried >= SYSTEMIC_PARTS and not went_through and after_go_through is None:
                after_go_through = cards_after_go_through(session, cursor, params, phase, batch)
            if systemic(session, run, phase, error, refused_past_the_batch=after_go_through is False):
                break
            ids, error = pending.pop()
            if len(ids) == 1:
                record_culprit(session, run, phase, ids[0], error)
                continue
            for part in (ids[:len(ids) // 2], ids[len(ids) // 2:]):
                session.check()
                tried += 1
                try:
                    with transaction.atomic(using=session.using):  # a savepoint: a failing part undoes itself
                        cursor.execute(phase.batch_sql, params | {"only_ids": array_literal(part)})
                        _, part_cards, part_overrides, *_ = cursor.fetchone()
                except DatabaseError as part_error:
                    if not is_data_error(part_error):
                        raise
                    pending.append((part, part_error))
                    continue
                went_through += 1
                deleted_cards += part_cards
                deleted_overrides += part_overrides
                run.in_flight = (phase.name, deleted_cards)
    return len(batch), deleted_cards, deleted_overrides


def systemic(
    session: JobSession, run: Run, phase: Phase, error: DatabaseError, *, refused_past_the_batch: bool
) -> bool:
    """Whether the refusals are no longer a few poison cards, the reason then logged and kept in the run: more than
    MAX_CULPRITS, or SYSTEMIC_PARTS parts all refused and the next batch's cards refused too (or none left). Cards
    after it that go through make the batch a wall of culprits, last night's say, isolated whole."""
    if len(run.culprits) > MAX_CULPRITS:
        reason = f"more than {MAX_CULPRITS} cards cannot be deleted ({len(run.culprits)} culprits)"
    elif refused_past_the_batch:
        reason = (f"the first {SYSTEMIC_PARTS} parts of a refused batch were all refused, and so were the cards "
                  f"after it ({len(run.culprits)} culprits found)")
    else:
        return False
    run.systemic_failure = f"{reason}: {first_line(error)}; run stopped"
    session.log.error(run.systemic_failure, extra={"phase": phase.name, "culprits": len(run.culprits)})
    return True


def cards_after_go_through(session: JobSession, cursor, params: dict, phase: Phase, batch: list[str]) -> bool:
    """The batch statement on the next batch's cards, past this refused batch's, under a savepoint rolled back
    whatever it did: whether it selected any, and deleted them."""
    session.check()
    skipped = array_literal(parse_array(params["skipped_ids"]) + batch)
    try:
        with transaction.atomic(using=session.using):
            cursor.execute(phase.batch_sql, params | {"only_ids": None, "skipped_ids": skipped})
            selected = cursor.fetchone()[0]
            transaction.set_rollback(True, using=session.using)
    except DatabaseError as error:
        if not is_data_error(error):
            raise
        return False
    return selected > 0


def record_culprit(session: JobSession, run: Run, phase: Phase, card_id: str, error: DatabaseError) -> None:
    message = first_line(error)
    run.culprits.append(Culprit(phase=phase.name, card_id=card_id, error=message))
    trace.get_current_span().add_event("culprit", {"card_id": card_id, "error": message})  # on isolate_culprits
    if len(run.culprits) <= CULPRITS_LISTED:
        session.log.error(
            "card cannot be deleted: left in place, the run counts as failed",
            extra={"phase": phase.name, "card_id": card_id, "error": message, "sqlstate": sqlstate(error)},
        )


def log_batch_failure(session: JobSession, run: Run, phase: Phase, error: DatabaseError, ids: list[str]) -> None:
    """One line for the failure, then the batch's ids as JSON arrays, chunked so that every line stays short."""
    parts, batch = math.ceil(len(ids) / IDS_PER_LOG_LINE), {"phase": phase.name, "batch_index": run.batches}
    session.log.error("batch failed", extra=batch | {"batch_size": len(ids), "error": first_line(error),
                                                     "sqlstate": sqlstate(error), "batch_id_parts": parts})
    for part in range(parts):
        chunk = ids[part * IDS_PER_LOG_LINE:(part + 1) * IDS_PER_LOG_LINE]
        session.log.error("batch ids", extra=batch | {"part": part + 1, "parts": parts, "batch_ids": chunk})

"""DelistedRetentionJob: physically delete catalog cards that have been Delisted for longer than the retention.

Deletion is irreversible, so the safety design is explicit:

* Only rows matching the predicate `status = 'Delisted' AND updated_at < cutoff` are ever selected, and the
  DELETE repeats that predicate as a guard. `cutoff` is computed once per run from the database clock. A
  Delisted row is frozen (INV-7, INV-5), so `updated_at` is the moment it was delisted.
* Every batch is one transaction: it locks its cards `FOR UPDATE SKIP LOCKED`, then deletes the cards and
  their display overrides (live and soft-deleted) in one statement. A failing batch rolls back whole; earlier
  batches stay committed; the next run resumes from the data (no checkpoint, no audit, no outbox rows).
* The DELETE finds the locked rows by their row address (`ctid`), which cannot change while this transaction
  holds their row locks: no UPDATE or DELETE can touch them, and VACUUM never moves a live row.
* Property objects go first (phase A), projects second (phase B). A project that still has any property-object
  card is never selected, and the project DELETE re-checks that in a new statement, after its rows are locked:
  an object upsert holds its project `FOR KEY SHARE`, so once the project is locked no object can appear
  under it, and any that appeared before is visible to the re-check. No property object is left dangling.
* A source upsert that holds a row lock wins: SKIP LOCKED passes over the row, and once restored the row no
  longer matches the predicate. If the job locks first, the card is deleted and the upsert creates a fresh one.
"""

import logging
import math
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.db.models.expressions import RawSQL
from psycopg import sql

from catalog.models import (
    BuildingDisplayOverride,
    CardStatus,
    ProjectCard,
    PropertyObjectCard,
    PropertyObjectDisplayOverride,
)
from retention.backlog import compute_cutoff
from retention.locks import advisory_lock
from retention.metrics import RunMetrics

logger = logging.getLogger(__name__)

LOCK_NAME = "job:scheduled:catalog-delisted-retention"
MAX_BATCH_SIZE = 10_000
# Beyond these bounds a limit is a typo, not a choice; some would overflow the database or the clock.
MAX_RETENTION = timedelta(days=36_500)
MAX_BATCHES_PER_RUN = 1_000_000
MAX_RUN_DURATION = timedelta(hours=24)  # a nightly run must end before the next one is due
MAX_BATCH_PAUSE = timedelta(minutes=1)
MAX_TIMEOUT = timedelta(milliseconds=2**31 - 1)  # the largest statement_timeout / lock_timeout PostgreSQL takes


class PurgeSettingsError(ValueError):
    """A limit of the run is out of range. Raised before anything is locked or touched."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class StopReason:
    COMPLETED = "completed"
    MAX_BATCHES = "max_batches"
    MAX_DURATION = "max_duration"
    STOPPED = "stopped"
    LOCK_BUSY = "lock_busy"


@dataclass(frozen=True)
class PurgeResult:
    """What a run did (or, with dry_run, would do). Deleted-override counts include soft-deleted overrides."""

    run_id: uuid.UUID
    cutoff: datetime | None
    stop_reason: str
    has_more: bool = False
    deleted_property_object_cards: int = 0
    deleted_project_cards: int = 0
    deleted_property_object_overrides: int = 0
    deleted_building_overrides: int = 0
    batches_processed: int = 0
    projects_held_back: int = 0
    overdue_property_object_cards: int = 0
    overdue_project_cards: int = 0
    duration_seconds: float = 0.0
    dry_run: bool = False

    @property
    def deleted_overrides(self) -> int:
        return self.deleted_property_object_overrides + self.deleted_building_overrides

    def as_dict(self) -> dict[str, Any]:
        fields = asdict(self)
        fields["run_id"] = str(self.run_id)
        fields["cutoff"] = self.cutoff.isoformat() if self.cutoff else None
        fields["deleted_overrides"] = self.deleted_overrides
        return fields


def validate_limits(
    *,
    retention: timedelta,
    batch_size: int,
    max_batches: int,
    max_duration: timedelta,
    batch_pause: timedelta = timedelta(0),
    statement_timeout: timedelta = timedelta(minutes=1),
    lock_timeout: timedelta = timedelta(seconds=5),
) -> None:
    # Each limit is reported in the unit its option and setting use.
    if not timedelta(0) < retention <= MAX_RETENTION:
        raise PurgeSettingsError(
            "retention", f"retention period must be greater than zero and at most {MAX_RETENTION.days} days, "
            f"got {retention / timedelta(days=1):.15g} days",
        )
    if not 1 <= batch_size <= MAX_BATCH_SIZE:
        raise PurgeSettingsError("batch_size", f"batch size must be between 1 and {MAX_BATCH_SIZE}, got {batch_size}")
    if not 1 <= max_batches <= MAX_BATCHES_PER_RUN:
        raise PurgeSettingsError(
            "max_batches", f"max batches per run must be between 1 and {MAX_BATCHES_PER_RUN}, got {max_batches}"
        )
    if not timedelta(0) < max_duration <= MAX_RUN_DURATION:
        raise PurgeSettingsError(
            "max_duration", f"max run duration must be greater than zero and at most "
            f"{MAX_RUN_DURATION.total_seconds():.15g} seconds, got {max_duration.total_seconds():.15g} seconds",
        )
    if not timedelta(0) <= batch_pause <= MAX_BATCH_PAUSE:
        raise PurgeSettingsError(
            "batch_pause", f"batch pause must be between 0 and {milliseconds(MAX_BATCH_PAUSE)} ms, "
            f"got {batch_pause / timedelta(milliseconds=1):.15g} ms",
        )
    for field, timeout in (("statement_timeout", statement_timeout), ("lock_timeout", lock_timeout)):
        if not timedelta(0) < timeout <= MAX_TIMEOUT:
            raise PurgeSettingsError(
                field, f"{field.replace('_', ' ')} must be greater than zero and at most "
                f"{milliseconds(MAX_TIMEOUT)} ms, got {timeout / timedelta(milliseconds=1):.15g} ms",
            )


def overdue(model, cutoff: datetime) -> QuerySet:
    return model.objects.filter(status=CardStatus.DELISTED, updated_at__lt=cutoff)


def overdue_property_objects(cutoff: datetime) -> QuerySet:
    return overdue(PropertyObjectCard, cutoff)


def overdue_projects(cutoff: datetime) -> QuerySet:
    """Overdue projects that have no property-object card left (of any status)."""
    return overdue(ProjectCard, cutoff).exclude(Exists(PropertyObjectCard.objects.filter(project_id=OuterRef("id"))))


def delete_statement(*, cards: str, overrides: str, override_key: str, guard: str = "") -> str:
    """One statement deleting the locked batch's cards (predicate repeated) and the overrides of exactly the
    cards it deleted. Parameters: the locked rows' addresses as a tid[] literal, then the cutoff.

    By address, not by `id = ANY(ids)`: a TID scan reads each row's heap page directly. Given the ids, the planner
    combined the primary key with the partial index (a BitmapAnd reading every overdue entry), so a batch cost
    grew with the backlog and, through primary-key pages out of cache, with the table."""
    return (
        sql.SQL(
            """
            WITH deleted_cards AS (
                DELETE FROM {cards} AS card
                 WHERE card.ctid = ANY(%s::tid[])
                   AND card.status = 'Delisted' AND card.updated_at < %s {guard}
                RETURNING card.id
            ), deleted_overrides AS (
                DELETE FROM {overrides}
                 WHERE {override_key} IN (SELECT id FROM deleted_cards)
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM deleted_cards), (SELECT count(*) FROM deleted_overrides)
            """
        )
        .format(
            cards=sql.Identifier("catalog", cards),
            overrides=sql.Identifier("catalog", overrides),
            override_key=sql.Identifier(override_key),
            guard=sql.SQL(guard),
        )
        .as_string(None)
    )


@dataclass(frozen=True)
class Phase:
    name: str
    select_overdue: Callable[[datetime], QuerySet]
    delete_sql: str


PROPERTY_OBJECTS = Phase(
    name="property_objects",
    select_overdue=overdue_property_objects,
    delete_sql=delete_statement(
        cards="property_object_cards",
        overrides="property_object_display_overrides",
        override_key="property_object_id",
    ),
)
PROJECTS = Phase(
    name="projects",
    select_overdue=overdue_projects,
    delete_sql=delete_statement(
        cards="project_cards",
        overrides="building_display_overrides",
        override_key="project_id",
        guard="AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id)",
    ),
)
PHASES = (PROPERTY_OBJECTS, PROJECTS)


@dataclass(frozen=True)
class BatchOutcome:
    selected: int
    deleted_cards: int
    deleted_overrides: int


class RunLog(logging.LoggerAdapter):
    """Adds run_id to every record of a run as a structured field, keeping the call's own extra fields."""

    def process(self, msg, kwargs):
        kwargs["extra"] = {**self.extra, **kwargs.get("extra", {})}
        return msg, kwargs


def purge_delisted_cards(
    *,
    retention: timedelta,
    batch_size: int,
    max_batches: int,
    max_duration: timedelta,
    dry_run: bool = False,
    now: datetime | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_batch: Callable[[int], None] | None = None,
    batch_pause: timedelta = timedelta(0),
    statement_timeout: timedelta = timedelta(minutes=1),
    lock_timeout: timedelta = timedelta(seconds=5),
    lock_using: str = "default",
    using: str = "default",
) -> PurgeResult:
    """Run the job once: validate, take the advisory lock (a busy lock is a normal skip), purge phase A then B.

    `now` replaces the database clock in tests only. `should_stop` is asked before every batch (the command wires
    it to SIGTERM/SIGINT); `on_batch` is told how many cards each batch deleted (progress). `batch_pause` sleeps
    between batches to leave room for live traffic. `statement_timeout` and `lock_timeout` bound each batch
    transaction, so a stuck batch cannot hold its row locks for long. A dry run takes no lock and no row locks:
    it counts what this run would delete. A real run hands its metrics to the sinks the settings switch on
    (retention.metrics); a metrics failure is only a warning.
    """
    validate_limits(
        retention=retention, batch_size=batch_size, max_batches=max_batches, max_duration=max_duration,
        batch_pause=batch_pause, statement_timeout=statement_timeout, lock_timeout=lock_timeout,
    )
    run_id = uuid.uuid4()
    log = RunLog(logger, {"run_id": str(run_id)})
    if dry_run:
        return preview_purge(
            run_id=run_id, cutoff=compute_cutoff(retention, now, using), batch_size=batch_size,
            max_batches=max_batches, using=using,
        )
    metrics = RunMetrics(run_id=run_id, max_duration=max_duration, using=using)
    with advisory_lock(LOCK_NAME, using=lock_using) as acquired:
        if not acquired:
            log.warning("purge skipped run_id=%s: lock %s is held by another run", run_id, LOCK_NAME)
            result = PurgeResult(run_id=run_id, cutoff=None, stop_reason=StopReason.LOCK_BUSY)
            metrics.run_finished(result)
            return result
        cutoff = compute_cutoff(retention, now, using)
        metrics.run_started(cutoff)
        try:
            result = run_phases(
                run_id=run_id, log=log, cutoff=cutoff, batch_size=batch_size,
                max_batches=max_batches, max_duration=max_duration, should_stop=should_stop or (lambda: False),
                on_batch=on_batch or (lambda deleted: None), batch_pause=batch_pause,
                timeouts=(statement_timeout, lock_timeout), using=using,
            )
        except Exception:
            metrics.run_failed()
            raise
        metrics.run_finished(result)
        return result


def run_phases(
    *, run_id, log, cutoff, batch_size, max_batches, max_duration, should_stop, on_batch, batch_pause, timeouts,
    using,
) -> PurgeResult:
    started = time.monotonic()
    overdue_objects, overdue_projects_total = count_overdue(cutoff, using)
    log.info(
        "purge started run_id=%s cutoff=%s batch_size=%s overdue_property_objects=%s overdue_projects=%s",
        run_id, cutoff.isoformat(), batch_size, overdue_objects, overdue_projects_total,
        extra={"cutoff": cutoff.isoformat(), "batch_size": batch_size},
    )
    selections = compile_batch_selections(cutoff=cutoff, batch_size=batch_size, using=using)
    deleted_cards = dict.fromkeys(PHASES, 0)
    deleted_overrides = dict.fromkeys(PHASES, 0)
    batches = 0
    stop_reason = StopReason.COMPLETED
    remaining_phases = list(PHASES)
    while remaining_phases:
        phase = remaining_phases[0]
        if batches and batch_pause:
            time.sleep(batch_pause.total_seconds())  # before the checks: a stop asked meanwhile is honoured
        stop_reason = reason_to_stop(
            should_stop=should_stop, batches=batches, max_batches=max_batches,
            elapsed=time.monotonic() - started, max_duration=max_duration,
        )
        if stop_reason != StopReason.COMPLETED:
            break
        outcome = delete_batch(
            phase, selection=selections[phase], cutoff=cutoff, batch_index=batches, timeouts=timeouts, log=log,
            using=using,
        )
        if outcome.selected:
            on_batch(outcome.deleted_cards)
            batches += 1
            deleted_cards[phase] += outcome.deleted_cards
            deleted_overrides[phase] += outcome.deleted_overrides
            log.debug(
                "batch done run_id=%s phase=%s batch_index=%s selected=%s deleted_cards=%s deleted_overrides=%s",
                run_id, phase.name, batches - 1, outcome.selected, outcome.deleted_cards, outcome.deleted_overrides,
                extra={"phase": phase.name, "batch_index": batches - 1, "deleted_cards": outcome.deleted_cards,
                       "deleted_overrides": outcome.deleted_overrides},
            )
        if outcome.selected < batch_size:
            remaining_phases.pop(0)  # this phase ran dry

    has_more = any(phase.select_overdue(cutoff).using(using).exists() for phase in remaining_phases)
    result = PurgeResult(
        run_id=run_id,
        cutoff=cutoff,
        stop_reason=stop_reason,
        has_more=has_more,
        deleted_property_object_cards=deleted_cards[PROPERTY_OBJECTS],
        deleted_project_cards=deleted_cards[PROJECTS],
        deleted_property_object_overrides=deleted_overrides[PROPERTY_OBJECTS],
        deleted_building_overrides=deleted_overrides[PROJECTS],
        batches_processed=batches,
        projects_held_back=count_projects_held_back(cutoff, using),
        overdue_property_object_cards=overdue_objects,
        overdue_project_cards=overdue_projects_total,
        duration_seconds=round(time.monotonic() - started, 3),
    )
    log.info(
        "purge completed run_id=%s stop_reason=%s has_more=%s deleted_property_object_cards=%s "
        "deleted_project_cards=%s deleted_overrides=%s batches=%s projects_held_back=%s duration=%.3fs",
        run_id, result.stop_reason, result.has_more, result.deleted_property_object_cards,
        result.deleted_project_cards, result.deleted_overrides, result.batches_processed,
        result.projects_held_back, result.duration_seconds,
        extra={key: value for key, value in result.as_dict().items() if key != "run_id"},
    )
    return result


def reason_to_stop(*, should_stop, batches, max_batches, elapsed, max_duration) -> str:
    if should_stop():
        return StopReason.STOPPED
    if batches >= max_batches:
        return StopReason.MAX_BATCHES
    if elapsed >= max_duration.total_seconds():
        return StopReason.MAX_DURATION
    return StopReason.COMPLETED


def compile_batch_selections(*, cutoff, batch_size, using) -> dict[Phase, tuple[str, tuple]]:
    """Each phase's batch SELECT (lock the oldest overdue rows) as SQL and parameters, compiled once per run: the
    cutoff is fixed for the run, and rebuilding the ORM query cost ~1.5 ms of CPU per batch, CPU the job's host
    may share with live traffic. Django compiles FOR UPDATE only inside a transaction; this one sends nothing."""
    with transaction.atomic(using=using):
        return {phase: batch_selection(phase, cutoff=cutoff, batch_size=batch_size, using=using) for phase in PHASES}


def batch_selection(phase: Phase, *, cutoff, batch_size, using) -> tuple[str, tuple]:
    locked = (
        phase.select_overdue(cutoff).using(using)
        .order_by("updated_at", "id")
        .select_for_update(skip_locked=True)
        .values("id", row_address=RawSQL("ctid", ()))[:batch_size]
    )
    locked_sql, params = locked.query.sql_with_params()
    # Ids and addresses travel as one array text value each, not thousands of bound parameters. The ids are only
    # for the error log.
    return f"SELECT count(*), array_agg(id)::text, array_agg(row_address)::text FROM ({locked_sql}) AS batch", params


def delete_batch(phase: Phase, *, selection, cutoff, batch_index, timeouts, log, using) -> BatchOutcome:
    """One batch, one transaction, three statements: bound it, lock the oldest overdue ids, delete them."""
    statement_timeout, lock_timeout = timeouts
    batch_ids = None
    try:
        with transaction.atomic(using=using), connections[using].cursor() as cursor:
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true), set_config('lock_timeout', %s, true)",
                [f"{milliseconds(statement_timeout)}ms", f"{milliseconds(lock_timeout)}ms"],
            )
            selection_sql, params = selection
            cursor.execute(selection_sql, params)
            selected, batch_ids, row_addresses = cursor.fetchone()
            if not selected:
                return BatchOutcome(selected=0, deleted_cards=0, deleted_overrides=0)
            cursor.execute(phase.delete_sql, [row_addresses, cutoff])
            deleted_cards, deleted_overrides = cursor.fetchone()
    except Exception:
        log.exception(
            "batch failed run_id=%s phase=%s batch_index=%s batch_ids=%s",
            log.extra["run_id"], phase.name, batch_index, batch_ids or "(not selected)",
            extra={"phase": phase.name, "batch_index": batch_index, "batch_ids": batch_ids},
        )
        raise
    return BatchOutcome(selected=selected, deleted_cards=deleted_cards, deleted_overrides=deleted_overrides)


def milliseconds(duration: timedelta) -> int:
    return max(1, round(duration.total_seconds() * 1000))


def count_overdue(cutoff: datetime, using: str) -> tuple[int, int]:
    """All overdue Delisted cards, projects held back or not (both counts read the partial indexes)."""
    return (
        overdue(PropertyObjectCard, cutoff).using(using).count(),
        overdue(ProjectCard, cutoff).using(using).count(),
    )


def count_projects_held_back(cutoff: datetime, using: str) -> int:
    return (
        overdue(ProjectCard, cutoff).using(using)
        .filter(Exists(PropertyObjectCard.objects.filter(project_id=OuterRef("id"))))
        .count()
    )


def preview_purge(*, run_id, cutoff, batch_size, max_batches, using) -> PurgeResult:
    """Dry run: what a run with these limits would delete now (max_duration aside), reading without locks.

    It follows the real loop: phase A takes up to max_batches batches; phase B gets the batches left over only
    if phase A ran dry, and then every project whose objects are all overdue has become purgeable.
    """
    started = time.monotonic()
    overdue_objects, overdue_projects_total = count_overdue(cutoff, using)
    capacity = batch_size * max_batches
    objects_to_delete = min(overdue_objects, capacity)
    batches = math.ceil(objects_to_delete / batch_size)
    phase_a_runs_dry = overdue_objects <= capacity
    # Projects blocked by objects that this run will not delete.
    surviving_objects = PropertyObjectCard.objects.filter(project_id=OuterRef("id"))
    if phase_a_runs_dry:
        surviving_objects = surviving_objects.exclude(status=CardStatus.DELISTED, updated_at__lt=cutoff)
    held_back = overdue(ProjectCard, cutoff).using(using).filter(Exists(surviving_objects))
    purgeable_projects = overdue(ProjectCard, cutoff).using(using).exclude(Exists(surviving_objects))

    projects_to_delete = 0
    if phase_a_runs_dry and batches < max_batches:
        projects_to_delete = min(purgeable_projects.count(), batch_size * (max_batches - batches))
        batches += math.ceil(projects_to_delete / batch_size)
    would_have_more = (not phase_a_runs_dry) or purgeable_projects.count() > projects_to_delete
    object_overrides, building_overrides = count_overrides_of_oldest(
        cutoff, objects_to_delete, purgeable_projects, projects_to_delete, using
    )
    return PurgeResult(
        run_id=run_id,
        cutoff=cutoff,
        stop_reason=StopReason.MAX_BATCHES if would_have_more else StopReason.COMPLETED,
        has_more=would_have_more,
        deleted_property_object_cards=objects_to_delete,
        deleted_project_cards=projects_to_delete,
        deleted_property_object_overrides=object_overrides,
        deleted_building_overrides=building_overrides,
        batches_processed=batches,
        projects_held_back=held_back.count(),
        overdue_property_object_cards=overdue_objects,
        overdue_project_cards=overdue_projects_total,
        duration_seconds=round(time.monotonic() - started, 3),
        dry_run=True,
    )


def count_overrides_of_oldest(cutoff, objects, purgeable_projects, projects, using) -> tuple[int, int]:
    """Overrides of the `objects` oldest overdue property objects and the `projects` oldest purgeable projects:
    the same rows, in the same order, that the real batches would take."""
    oldest_objects = overdue_property_objects(cutoff).using(using).order_by("updated_at", "id").values("id")[:objects]
    oldest_projects = purgeable_projects.order_by("updated_at", "id").values("id")[:projects]
    return (
        PropertyObjectDisplayOverride.objects.using(using).filter(property_object_id__in=oldest_objects).count()
        if objects else 0,
        BuildingDisplayOverride.objects.using(using).filter(project_id__in=oldest_projects).count()
        if projects else 0,
    )

"""What a run of the retention job says about itself: what it counts as it goes (`Run`), why it stopped, its result and
outcome, decided in one place (`Run.result`), and its error in an operator's words. The service, the command, the
metrics and the admin page all speak this vocabulary."""

import enum
import json
import time
import uuid
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

from django.db import OperationalError

from config.logging import current_trace_id, first_line


class StopReason(enum.StrEnum):
    COMPLETED = "completed"  # every phase ran dry
    MAX_BATCHES = "max_batches"
    MAX_DURATION = "max_duration"
    REPLICA_LAG = "replica_lag"  # the standbys stayed behind for longer than the job may wait
    STOPPED = "stopped"  # SIGTERM / SIGINT
    LOCK_BUSY = "lock_busy"  # another run holds the advisory lock
    FAILED = "failed"  # an infrastructure error, bad input or a systemic refusal ended the run


class Outcome(enum.StrEnum):
    """A run as the alerts see it (`catalog_delisted_retention_last_run_outcome{outcome}`)."""

    COMPLETED = "completed"
    HAS_MORE = "has_more"
    STOPPED = "stopped"
    LOCK_BUSY = "lock_busy"
    FAILED = "failed"


SUCCESSFUL_OUTCOMES = (Outcome.COMPLETED, Outcome.HAS_MORE)

# The result's counts of what a run deleted (a dry run: would delete).
DELETED_COUNTS = ("deleted_property_object_cards", "deleted_project_cards", "deleted_property_object_overrides",
                  "deleted_building_overrides")
CULPRITS_LISTED = 20  # culprits logged one by one and carried in the result; the rest are only counted
# A culprit's error and the run's error in the result, as JSON: with 20 culprits stdout stays under 16 KiB.
CULPRIT_ERROR_BYTES, ERROR_JSON_BYTES = 500, 2000
SCHEMA_MISSING = "the catalog schema is missing in database {alias!r}: run `manage.py migrate`"
DATABASE_UNREACHABLE = "database {alias!r} is unreachable: {error}"
UNDEFINED_OBJECT_STATES = ("42P01", "3F000")  # undefined table, invalid schema name


@dataclass(frozen=True)
class Culprit:
    """A card whose own deletion fails for a data reason (a trigger, a constraint): left in place, the run failed."""

    phase: str
    card_id: str
    error: str


@dataclass(frozen=True)
class PurgeResult:
    """What a run did (or, with dry_run, would do). Deleted-override counts include soft-deleted overrides.

    `has_more` is None when it was never checked (a lock-busy skip, a run that failed before its end count).
    `overdue_*` are counted when the run starts; `projects_held_back` when it ends (overdue projects that still have
    a property-object card)."""

    run_id: uuid.UUID
    cutoff: datetime | None
    stop_reason: StopReason
    outcome: Outcome
    has_more: bool | None = None
    deleted_property_object_cards: int = 0
    deleted_project_cards: int = 0
    deleted_property_object_overrides: int = 0
    deleted_building_overrides: int = 0
    batches_processed: int = 0
    batch_retries: int = 0  # attempts of a batch that failed on a transient error and were run again
    projects_held_back: int | None = None
    overdue_property_object_cards: int | None = None
    overdue_project_cards: int | None = None
    replica_lag_wait_seconds: float = 0.0
    duration_seconds: float = 0.0
    culprits: tuple[Culprit, ...] = ()  # the first CULPRITS_LISTED of them
    culprit_count: int = 0
    # Cards of the batch whose COMMIT got no answer (the connection was lost): deleted or not, the next run knows.
    uncertain_cards: int = 0
    error: str | None = None
    dry_run: bool = False
    trace_id: str | None = None  # the run's trace (32 lowercase hex digits); None when tracing is off

    @property
    def deleted_overrides(self) -> int:
        return self.deleted_property_object_overrides + self.deleted_building_overrides

    def log_fields(self) -> dict[str, Any]:
        """The `purge completed` line's fields: the run id and trace id are on every line of the run already."""
        fields = self.as_dict()
        del fields["run_id"], fields["trace_id"]
        return fields | {"culprits": [culprit.card_id for culprit in self.culprits]}

    def as_dict(self) -> dict[str, Any]:
        """The `--json` object. A dry run deleted nothing: its counts are named `would_delete_*`."""
        fields = asdict(self) | {"run_id": str(self.run_id), "cutoff": self.cutoff and self.cutoff.isoformat(),
                                 "deleted_overrides": self.deleted_overrides}  # the outcomes are strings already
        if self.dry_run:
            fields = {
                key.replace("deleted_", "would_delete_", 1) if key.startswith("deleted_") else key: value
                for key, value in fields.items()
            }
        return fields


@dataclass
class Run:
    """What a run counts as it goes, and its result, the one place its outcome is decided."""

    run_id: uuid.UUID
    started: float = field(default_factory=time.monotonic)
    dry_run: bool = False
    cutoff: datetime | None = None
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DELETED_COUNTS, 0))
    batches: int = 0
    batch_retries: int = 0
    culprits: list[Culprit] = field(default_factory=list)
    systemic_failure: str | None = None  # why the refusals are no longer a few poison cards
    replica_lag_wait: float = 0.0
    in_flight: tuple[str, int] | None = None  # the batch sent, not yet committed: its phase and the cards it deleted
    unknown_commit: dict | None = None  # the batch whose COMMIT got no answer: its index, phase and cards

    def result(self, stop_reason: StopReason, *, has_more: bool | None = None, error: str | None = None,
               **fields) -> PurgeResult:
        """The run's result. It fails on an error (the infrastructure's, bad input, a systemic refusal) and on
        culprits (also when it was then stopped: cron must hear of them). A run that stopped on a limit or completed
        is judged by what it left (`has_more`): unknown is not "nothing left"."""
        culprits = len(self.culprits)
        if error is None and (culprits or self.systemic_failure):
            error = self.systemic_failure or (f"{culprits} card(s) cannot be deleted and were left in place; the "
                                              f"first {min(culprits, CULPRITS_LISTED)} are logged with their id and "
                                              f"error")
        if stop_reason is StopReason.FAILED or culprits:
            outcome = Outcome.FAILED
        elif stop_reason in (StopReason.STOPPED, StopReason.LOCK_BUSY):
            outcome = Outcome(stop_reason)  # the stop reasons that are an outcome by themselves
        else:
            outcome = Outcome.COMPLETED if has_more is False else Outcome.HAS_MORE
        return PurgeResult(
            run_id=self.run_id, cutoff=self.cutoff, stop_reason=stop_reason, outcome=outcome, has_more=has_more,
            culprits=tuple(replace(culprit, error=within_json(culprit.error, CULPRIT_ERROR_BYTES))
                           for culprit in self.culprits[:CULPRITS_LISTED]),
            culprit_count=culprits, uncertain_cards=self.unknown_commit["cards"] if self.unknown_commit else 0,
            replica_lag_wait_seconds=round(self.replica_lag_wait, 3),
            error=error and within_json(error, ERROR_JSON_BYTES), dry_run=self.dry_run,
            duration_seconds=round(time.monotonic() - self.started, 3), trace_id=current_trace_id(),
            # A dry run's fields are its own.
            **{"batches_processed": self.batches, "batch_retries": self.batch_retries, **self.counts, **fields},
        )


def within_json(text: str, limit: int) -> str:
    """`text`, shortened until it takes at most `limit` bytes as a JSON string: escapes can make a character six
    bytes (a quote two, a control character or a non-ASCII one six)."""
    while len(json.dumps(text)) > limit:
        text = text[:len(text) * 3 // 4 - 1] + "…"
    return text


def sqlstate(error: BaseException) -> str | None:
    """The SQLSTATE of a database error, which Django keeps on the psycopg error it wraps."""
    return getattr(error, "sqlstate", None) or getattr(error.__cause__, "sqlstate", None)


def database_problem(error: Exception, using: str) -> str:
    """A database error in one line, a missing schema and an unreachable server in an operator's words."""
    if sqlstate(error) in UNDEFINED_OBJECT_STATES:
        return SCHEMA_MISSING.format(alias=using)
    if sqlstate(error) is None and isinstance(error, OperationalError):
        return DATABASE_UNREACHABLE.format(alias=using, error=first_line(error))
    return first_line(error)


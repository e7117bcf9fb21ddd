"""What a run of the retention job says about itself: its result, why it stopped, its outcome. The bottom module of
`retention/`: the service, the command, the metrics and the admin page all speak this vocabulary."""

import enum
import json
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any


class StopReason(enum.StrEnum):
    COMPLETED = "completed"  # every phase ran dry
    MAX_BATCHES = "max_batches"
    MAX_DURATION = "max_duration"
    REPLICA_LAG = "replica_lag"  # the standbys stayed behind for longer than the job may wait
    STOPPED = "stopped"  # SIGTERM / SIGINT
    LOCK_BUSY = "lock_busy"  # another run holds the advisory lock
    FAILED = "failed"  # an infrastructure error ended the run


class Outcome(enum.StrEnum):
    """A run as the alerts see it (`catalog_delisted_retention_last_run_outcome{outcome}`)."""

    COMPLETED = "completed"
    HAS_MORE = "has_more"
    STOPPED = "stopped"
    LOCK_BUSY = "lock_busy"
    FAILED = "failed"


SUCCESSFUL_OUTCOMES = (Outcome.COMPLETED, Outcome.HAS_MORE)


# The result's counts of what a run deleted (a dry run: would delete).
DELETED_COUNTS = (
    "deleted_property_object_cards", "deleted_project_cards", "deleted_property_object_overrides",
    "deleted_building_overrides",
)


@dataclass(frozen=True)
class Culprit:
    """A card whose own deletion fails for a data reason (a trigger raising, a constraint): isolated from its batch,
    left in place, logged once, and the reason the run counts as failed."""

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
    outcome: Outcome  # decided by retention.service.run_result
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
    culprits: tuple[Culprit, ...] = ()  # the first CULPRITS_LISTED (retention.service) of them
    culprit_count: int = 0
    # Cards of the batch whose COMMIT got no answer (the connection was lost): deleted or not, the next run knows.
    uncertain_cards: int = 0
    error: str | None = None
    dry_run: bool = False
    trace_id: str | None = None  # the run's trace (32 lowercase hex digits); None when tracing is off

    @property
    def deleted_overrides(self) -> int:
        return self.deleted_property_object_overrides + self.deleted_building_overrides

    def as_dict(self) -> dict[str, Any]:
        """The `--json` object. A dry run deleted nothing: its counts are named `would_delete_*`."""
        fields = asdict(self)
        fields["run_id"] = str(self.run_id)
        fields["cutoff"] = self.cutoff.isoformat() if self.cutoff else None
        fields["stop_reason"] = str(self.stop_reason)
        fields["outcome"] = str(self.outcome)
        fields["deleted_overrides"] = self.deleted_overrides
        if self.dry_run:
            fields = {
                key.replace("deleted_", "would_delete_", 1) if key.startswith("deleted_") else key: value
                for key, value in fields.items()
            }
        return fields


def within_json(text: str, limit: int) -> str:
    """`text`, shortened until it takes at most `limit` bytes as a JSON string: escapes can make a character six
    bytes (a quote two, a control character or a non-ASCII one six)."""
    while len(json.dumps(text)) > limit:
        text = text[:len(text) * 3 // 4 - 1] + "…"
    return text


class PurgeFailed(Exception):
    """The run failed: an infrastructure error ended it, or culprit cards could not be deleted. `result` holds what
    it did before (committed batches are final) and its one-line `error`."""

    def __init__(self, result: PurgeResult):
        super().__init__(result.error)
        self.result = result

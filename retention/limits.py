"""The limits of a run: one frozen, typed value (`PurgeLimits`), and one table (`LIMITS`) saying where each limit comes
from (command-line option, setting), in which unit, and within which bounds: beyond them a value is a typo, or would
overflow timedelta or PostgreSQL. `PurgeLimits.from_settings(options)`, the one constructor of the command, `manage.py
check`, the admin page and the web metrics, reports every bad value at once; a hand-built one validates the same way.
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings

MAX_TIMEOUT_MS = 2**31 - 1  # the largest statement_timeout / lock_timeout PostgreSQL takes


@dataclass(frozen=True)
class Limit:
    field: str
    description: str
    option: str | None  # None: a setting only
    variable: str  # the setting's name after DELISTED_RETENTION_, as the README's table of options gives it
    unit: str | None  # a timedelta unit ("days", "seconds", "milliseconds"), "factor", or None for a count
    minimum: float  # None: greater than zero (a duration; its setting, a whole number, is then at least 1)
    maximum: float

    @property
    def setting(self) -> str:
        return f"DELISTED_RETENTION_{self.variable}"

    @property
    def is_duration(self) -> bool:
        return self.unit in ("days", "seconds", "milliseconds")

    def typed(self, value: float) -> timedelta | float:
        """A value in this limit's unit as PurgeLimits holds it."""
        return timedelta(**{self.unit: value}) if self.is_duration else value

    def problem(self, value: float) -> str | None:
        """What is wrong with a value in this limit's unit, or None."""
        low_enough = value > 0 if self.minimum is None else value >= self.minimum
        if low_enough and value <= self.maximum:
            return None
        unit = f" {self.unit}" if self.is_duration else ""
        accepted = (
            f"greater than 0 and at most {number(self.maximum)}" if self.minimum is None
            else f"between {number(self.minimum)} and {number(self.maximum)}"
        )
        return f"{self.description} must be {accepted}{unit}, got {number(value)}{unit}"

    def problem_of_field(self, value: object) -> str | None:
        """What is wrong with a value of PurgeLimits' field, or None: a hand-built one can be of any type."""
        expected = timedelta if self.is_duration else (int, float) if self.unit == "factor" else int
        if isinstance(value, bool) or not isinstance(value, expected):
            example = f"timedelta({self.unit}=…)" if self.is_duration else "a number"
            return f"{self.field} must be {example}, got {type(value).__name__} {value!r}"
        return self.problem(value / timedelta(**{self.unit: 1}) if self.is_duration else value)


def number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 10**18 else f"{value:g}"


LIMITS = (  # field, description, option, setting (after DELISTED_RETENTION_), unit, minimum, maximum
    Limit("retention", "retention period", "--retention-days", "PERIOD_DAYS", "days", None, 36_500),
    Limit("batch_size", "batch size", "--batch-size", "BATCH_SIZE", None, 1, 10_000),
    Limit("max_batches", "max batches per run", "--max-batches", "MAX_BATCHES_PER_RUN", None, 1, 1_000_000),
    # A nightly run must end before the next one is due.
    Limit("max_duration", "max run duration", "--max-duration-seconds", "MAX_RUN_DURATION_SECONDS", "seconds", None,
          86_400),
    Limit("batch_pause", "batch pause", "--batch-pause-ms", "BATCH_PAUSE_MS", "milliseconds", 0, 60_000),
    # pt-archiver's --sleep-coef: after each batch, sleep this many times as long as the batch took.
    Limit("batch_pause_factor", "batch pause factor", "--batch-pause-factor", "BATCH_PAUSE_FACTOR", "factor", 0, 100),
    # 0 is off: the job does not look at the standbys.
    Limit("max_replica_lag", "max replica lag", "--max-replica-lag-seconds", "MAX_REPLICA_LAG_SECONDS", "seconds", 0,
          86_400),
    Limit("replica_lag_wait", "replica lag wait", "--replica-lag-wait-seconds", "REPLICA_LAG_WAIT_SECONDS", "seconds",
          None, 86_400),
    # The orphan-override sweep looks at overrides written this recently (a scan of recent rows, not of the tables).
    Limit("orphan_sweep_window", "orphan sweep window", "--orphan-sweep-days", "ORPHAN_SWEEP_DAYS", "days", None,
          36_500),
    Limit("statement_timeout", "statement timeout", None, "STATEMENT_TIMEOUT_MS", "milliseconds", None, MAX_TIMEOUT_MS),
    Limit("lock_timeout", "lock timeout", None, "LOCK_TIMEOUT_MS", "milliseconds", None, MAX_TIMEOUT_MS),
    # The server ends the job's session when the network to it has been dead this long, or its client silent this
    # much longer than the job ever is. At least 3 s: the job's short silences (a 2 s metrics export) fit in it.
    Limit("dead_peer_timeout", "dead peer timeout", None, "DEAD_PEER_TIMEOUT_SECONDS", "seconds", 3, 3600),
)
LIMIT_OF_FIELD = {limit.field: limit for limit in LIMITS}


class PurgeLimitsError(ValueError):
    """One or more limits are bad. Raised before anything is locked or read. `problems` pairs each bad limit with
    what is wrong, one line each, naming where an operator sets it: the option and the setting."""

    def __init__(self, problems: list[tuple[Limit, str]]):
        self.problems = problems
        super().__init__("; ".join(f"{limit.option} / {limit.setting}: {message}" if limit.option
                                   else f"{limit.setting}: {message}" for limit, message in problems))

    @classmethod
    def raise_any(cls, problems: list[tuple[Limit, str | None]]) -> None:
        """Raises for every limit with a problem at once."""
        if found := [(limit, message) for limit, message in problems if message]:
            raise cls(found)


@dataclass(frozen=True)
class PurgeLimits:
    retention: timedelta
    batch_size: int
    max_batches: int
    max_duration: timedelta
    batch_pause: timedelta
    batch_pause_factor: float
    max_replica_lag: timedelta
    replica_lag_wait: timedelta
    orphan_sweep_window: timedelta
    statement_timeout: timedelta
    lock_timeout: timedelta
    dead_peer_timeout: timedelta

    def __post_init__(self):
        PurgeLimitsError.raise_any([(limit, limit.problem_of_field(getattr(self, limit.field))) for limit in LIMITS])

    @property
    def longest_pause(self) -> timedelta:
        """The longest pause between two batches: after one that took its whole statement_timeout, and never past the
        run's end. So the server's idle bound below always fits PostgreSQL's largest timeout (24.8 days)."""
        return min(self.batch_pause + self.batch_pause_factor * self.statement_timeout, self.max_duration)

    @classmethod
    def from_settings(cls, options: Mapping[str, float | None] | None = None) -> "PurgeLimits":
        """The limits of tonight's run: each option given (in its unit, keyed by field; None: not given) over its
        setting. Every bad value is reported at once."""
        given = {field: value for field, value in (options or {}).items() if value is not None}
        values = {limit: given.get(limit.field, getattr(settings, limit.setting)) for limit in LIMITS}
        # Checked in their unit before they become timedeltas: a huge one would overflow timedelta.
        PurgeLimitsError.raise_any([(limit, limit.problem(value)) for limit, value in values.items()])
        return cls(**{limit.field: limit.typed(value) for limit, value in values.items()})

    def replace(self, **changes) -> "PurgeLimits":
        return dataclasses.replace(self, **changes)

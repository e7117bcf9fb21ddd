"""The last run, as the metrics sink the job writes holds it, and the backlog now: `purge_delisted --last-run` shows
them, and the admin's Delisted retention page reads the last run with the same reader (read_last_run). The sink, not
a table of the job's own: the job's role can write nothing but deletes.
"""

from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from retention import metrics
from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.limits import PurgeLimits
from retention.results import Outcome
from retention.session import Session

# A reader must not hang on a Pushgateway that accepts connections and never answers.
SINK_READ_TIMEOUT_SECONDS = 2
NO_SINK = "last run: unknown, no metrics sink is set (DELISTED_RETENTION_METRICS_TEXTFILE, PROMETHEUS_PUSHGATEWAY_URL)"


@dataclass(frozen=True)
class LastRun:
    """The last run that took the lock, as a metrics sink holds it. `overdue_left` is (property objects, projects),
    None when that run counted none of its own (a failure); `skipped_at` is a later start skipped because a run
    held the lock."""

    source: str
    outcome: Outcome
    ended_at: datetime
    duration_seconds: float
    batches: int
    deleted_property_object_cards: int
    deleted_project_cards: int
    deleted_overrides: int
    overdue_left: tuple[int, int] | None
    last_success_at: datetime | None
    skipped_at: datetime | None
    run_id: str | None
    trace_id: str | None


def last_run_of(reading: metrics.Reading, source: str) -> LastRun | None:
    outcomes = [name for name in metrics.RUN_OUTCOMES if reading.value(metrics.LAST_RUN_OUTCOME, outcome=name) == 1]
    if reading.value(metrics.LAST_RUN) is None or not outcomes:
        return None

    def count(name: str, **labels: str) -> int:
        return int(reading.value(name, **labels) or 0)

    def moment(name: str) -> datetime | None:
        value = reading.value(name)
        return None if value is None else datetime.fromtimestamp(value, UTC)

    ended_at, skipped_at = moment(metrics.LAST_RUN), moment(metrics.LAST_LOCK_BUSY)
    info = reading.labels(metrics.LAST_RUN_INFO) or {}
    overdue = [count(metrics.BACKLOG, kind=kind, scope="overdue") for kind in ("property_object", "project")]
    return LastRun(
        source=source, outcome=outcomes[0], ended_at=ended_at,
        duration_seconds=reading.value(metrics.LAST_RUN_DURATION) or 0.0, batches=count(metrics.LAST_RUN_BATCHES),
        deleted_property_object_cards=count(metrics.LAST_RUN_DELETED_CARDS, kind="property_object"),
        deleted_project_cards=count(metrics.LAST_RUN_DELETED_CARDS, kind="project"),
        deleted_overrides=count(metrics.LAST_RUN_DELETED_OVERRIDES),
        overdue_left=None if outcomes[0] == Outcome.FAILED else tuple(overdue),
        last_success_at=moment(metrics.LAST_SUCCESS),
        skipped_at=skipped_at if skipped_at and skipped_at > ended_at else None,
        run_id=info.get("run_id") or None, trace_id=info.get("trace_id") or None,
    )


def read_last_run() -> tuple[LastRun | None, list[str], list[str]]:
    """The last run from the first configured sink that recorded one (None: no sink did), the sinks read, and what
    kept any of them from being read."""
    sinks = metrics.configured_sinks()
    names, problems = [str(sink) for sink in sinks], []
    for sink, name in zip(sinks, names):
        try:
            reading = sink.read(timeout=SINK_READ_TIMEOUT_SECONDS)
        except Exception as error:  # a missing gateway, an unreadable file: the reader shows it and goes on
            problems.append(f"{name}: {error}")
            continue
        if last_run := last_run_of(reading, name):
            return last_run, names, problems
    return None, names, problems


@dataclass(frozen=True)
class LastRunReport:
    """`purge_delisted --last-run`: the last run as its sink holds it (or why none is known: the sinks read and their
    problems), and the backlog now with the nights it needs at the limits given."""

    last_run: LastRun | None
    sinks: list[str]
    sink_problems: list[str]
    backlog: Backlog
    cards_per_night: int

    def as_dict(self) -> dict:
        """The `--json` object: times in ISO 8601, how long the oldest overdue card is past due in days."""
        run, cutoff = self.last_run, self.backlog.cutoff
        return {
            "last_run": run and {name: iso(value) for name, value in asdict(run).items()},
            "sinks": self.sinks, "sink_problems": self.sink_problems,
            "backlog": {"cutoff": cutoff.isoformat()} | {
                kind: {"delisted": count.delisted, "overdue": count.overdue, "held_back": count.held_back,
                       "oldest_delisted_at": iso(count.oldest_delisted_at),
                       "days_past_due": round(count.days_past_due(cutoff), 1)}
                for kind, count in self.backlog.by_kind().items()
            },
            "cards_per_night": self.cards_per_night, "nights_needed": self.backlog.nights_needed(self.cards_per_night),
        }

    def summary(self) -> str:
        """The text the command prints: the last run, then the backlog."""
        run = self.last_run
        if not run:
            lines = [f"last run: none recorded in {', '.join(self.sinks)}" if self.sinks else NO_SINK]
            lines += [f"  could not read {problem}" for problem in self.sink_problems]
        else:
            lines = [
                f"last run: {run.outcome}, ended {when(run.ended_at)} after {run.duration_seconds:.3f} s",
                f"  deleted {run.deleted_property_object_cards:,} property objects, {run.deleted_project_cards:,} "
                f"projects and {run.deleted_overrides:,} display overrides in {run.batches:,} batches",
                *([f"  overdue after it: {run.overdue_left[0]:,} property objects, {run.overdue_left[1]:,} projects"]
                  if run.overdue_left else []),
                f"  last successful run: {when(run.last_success_at) if run.last_success_at else 'none'}",
                *([f"  skipped since: {when(run.skipped_at)}, while another run held the lock"]
                  if run.skipped_at else []),
                f"  run_id {run.run_id or 'unknown'}, trace_id {run.trace_id or 'none'}; from {run.source}",
            ]
        lines.append(f"backlog: cards Delisted before {when(self.backlog.cutoff)} are overdue")
        for kind, count in self.backlog.by_kind().items():
            past_due = count.days_past_due(self.backlog.cutoff)
            oldest = f", the oldest {past_due:.1f} days past due" if count.overdue else ""
            waiting = f", {count.held_back:,} waiting for their property objects" if count.held_back else ""
            lines.append(f"  {kind.replace('_', ' ')}: {count.overdue:,} overdue of {count.delisted:,} "
                         f"Delisted{oldest}{waiting}")
        if nights := self.backlog.nights_needed(self.cards_per_night):
            lines.append(f"  {nights:,} night{'' if nights == 1 else 's'} to clear them at up to "
                         f"{self.cards_per_night:,} cards a night")
        return "\n".join(lines)


def iso(value):
    return value.isoformat() if isinstance(value, datetime) else value


def when(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


def last_run_report(*, limits: PurgeLimits, using: str) -> LastRunReport:
    """The last run from the sinks the settings switch on, and the backlog counted now on `using` at `limits`."""
    session = Session(using)
    backlog = measure_backlog(session, cutoff=compute_cutoff(session, limits.retention))
    return LastRunReport(*read_last_run(), backlog, cards_per_night=limits.batch_size * limits.max_batches)

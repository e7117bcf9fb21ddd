"""The last run and the backlog it left, as the admin's Delisted retention page and `purge_delisted --last-run` show
them, read by one code. The last run comes from the metrics sink the job writes, not from a table of the job's own:
the job's role can write nothing but deletes.
"""

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from retention import metrics
from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.limits import PurgeLimits
from retention.results import Outcome
from retention.session import Session

# A reader must not hang on a Pushgateway that accepts connections and never answers.
SINK_READ_TIMEOUT_SECONDS = 2

OUTCOME_WORDING = {
    Outcome.COMPLETED: "Finished: every overdue card is gone",
    Outcome.HAS_MORE: "Stopped at its nightly limit: the overdue cards left wait for the next night",
    Outcome.STOPPED: "Stopped before it finished (shut down by the system or an operator)",
    Outcome.FAILED: "Failed: some cards could not be deleted; an operator should look at the job's log",
}


@dataclass(frozen=True)
class LastRun:
    """The last run that took the lock, as a metrics sink holds it. `overdue_left` is (property objects, projects),
    None when that run counted none of its own (a failure); `skipped_at` is a later start skipped because a run
    held the lock."""

    source: str
    outcome: Outcome
    wording: str
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

    @property
    def took(self) -> str:
        if self.duration_seconds < 1:
            return "under a second"
        if self.duration_seconds < 120:
            return f"{self.duration_seconds:.0f} seconds"
        return f"{self.duration_seconds / 60:.0f} minutes"


def last_run_of(reading: metrics.Reading, source: str) -> LastRun | None:
    ended = reading.value(metrics.LAST_RUN)
    outcome = next(
        (name for name in metrics.RUN_OUTCOMES if reading.value(metrics.LAST_RUN_OUTCOME, outcome=name) == 1), None
    )
    if ended is None or outcome is None:
        return None

    def count(name: str, **labels: str) -> int:
        return int(reading.value(name, **labels) or 0)

    def moment(name: str) -> datetime | None:
        value = reading.value(name)
        return None if value is None else datetime.fromtimestamp(value, UTC)

    ended_at, skipped_at = moment(metrics.LAST_RUN), moment(metrics.LAST_LOCK_BUSY)
    info = reading.labels(metrics.LAST_RUN_INFO) or {}
    return LastRun(
        source=source,
        outcome=outcome,
        wording=OUTCOME_WORDING[outcome],
        ended_at=ended_at,
        duration_seconds=reading.value(metrics.LAST_RUN_DURATION) or 0.0,
        batches=count(metrics.LAST_RUN_BATCHES),
        deleted_property_object_cards=count(metrics.LAST_RUN_DELETED_CARDS, kind="property_object"),
        deleted_project_cards=count(metrics.LAST_RUN_DELETED_CARDS, kind="project"),
        deleted_overrides=count(metrics.LAST_RUN_DELETED_OVERRIDES),
        overdue_left=None if outcome == Outcome.FAILED else (
            count(metrics.BACKLOG, kind="property_object", scope="overdue"),
            count(metrics.BACKLOG, kind="project", scope="overdue"),
        ),
        last_success_at=moment(metrics.LAST_SUCCESS),
        skipped_at=skipped_at if skipped_at and skipped_at > ended_at else None,
        run_id=info.get("run_id") or None,
        trace_id=info.get("trace_id") or None,
    )


@dataclass(frozen=True)
class LastRunReading:
    """The last run from the first configured sink that recorded one (None: no sink did), the sinks read, and
    what kept any of them from being read."""

    last_run: LastRun | None
    sinks: list[str]
    sink_problems: list[str]


def read_last_run() -> LastRunReading:
    sinks = metrics.configured_sinks()
    names, problems = [str(sink) for sink in sinks], []
    for sink, name in zip(sinks, names):
        try:
            reading = sink.read(timeout=SINK_READ_TIMEOUT_SECONDS)
        except Exception as error:  # a missing gateway, an unreadable file: the reader shows it and goes on
            problems.append(f"{name}: {error}")
            continue
        if last_run := last_run_of(reading, name):
            return LastRunReading(last_run, names, problems)
    return LastRunReading(None, names, problems)


@dataclass(frozen=True)
class LastRunReport:
    """`purge_delisted --last-run`: the last run as its sink holds it (or why none is known), and the backlog now
    with the nights it needs at the limits given."""

    reading: LastRunReading
    backlog: Backlog
    cards_per_night: int

    def as_dict(self) -> dict:
        """The `--json` object: times in ISO 8601, how long the oldest overdue card is past due in days."""
        run, cutoff = self.reading.last_run, self.backlog.cutoff
        return {
            "last_run": run and {name: iso(value) for name, value in asdict(run).items()} | {"took": run.took},
            "sinks": self.reading.sinks,
            "sink_problems": self.reading.sink_problems,
            "backlog": {"cutoff": cutoff.isoformat()} | {
                kind: {
                    "delisted": count.delisted, "overdue": count.overdue, "held_back": count.held_back,
                    "oldest_delisted_at": iso(count.oldest_delisted_at),
                    "days_past_due": round(count.overdue_age(cutoff) / timedelta(days=1), 1),
                }
                for kind, count in self.backlog.by_kind().items()
            },
            "cards_per_night": self.cards_per_night,
            "nights_needed": self.backlog.nights_needed(self.cards_per_night),
        }

    def summary(self) -> str:
        """The text the command prints: the last run in the admin page's words, then the backlog."""
        run, lines = self.reading.last_run, []
        if run:
            lines += [
                f"last run: ended {when(run.ended_at)}, took {run.took}: {run.wording}",
                f"  deleted {run.deleted_property_object_cards:,} property objects, {run.deleted_project_cards:,} "
                f"projects and {run.deleted_overrides:,} display overrides in {run.batches:,} batches",
            ]
            if run.overdue_left:
                lines.append(f"  overdue after it: {run.overdue_left[0]:,} property objects, "
                             f"{run.overdue_left[1]:,} projects")
            lines.append(f"  last successful run: {when(run.last_success_at) if run.last_success_at else 'none'}")
            if run.skipped_at:
                lines.append(f"  skipped since: {when(run.skipped_at)}, while another run held the lock")
            lines.append(f"  run_id {run.run_id or 'unknown'}, trace_id {run.trace_id or 'none'}; from {run.source}")
        elif self.reading.sinks:
            lines.append(f"last run: none recorded in {', '.join(self.reading.sinks)}")
            lines += [f"  could not read {problem}" for problem in self.reading.sink_problems]
        else:
            lines.append("last run: unknown, no metrics sink is set (DELISTED_RETENTION_METRICS_TEXTFILE, "
                         "PROMETHEUS_PUSHGATEWAY_URL)")
        lines.append(f"backlog: cards Delisted before {when(self.backlog.cutoff)} are overdue")
        for kind, count in self.backlog.by_kind().items():
            past_due = count.overdue_age(self.backlog.cutoff) / timedelta(days=1)
            oldest = f", the oldest {past_due:.1f} days past due" if count.overdue else ""
            waiting = f", {count.held_back:,} waiting for their property objects" if count.held_back else ""
            lines.append(
                f"  {kind.replace('_', ' ')}: {count.overdue:,} overdue of {count.delisted:,} Delisted{oldest}{waiting}"
            )
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
    return LastRunReport(read_last_run(), backlog, cards_per_night=limits.batch_size * limits.max_batches)

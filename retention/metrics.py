"""Prometheus metrics of the retention job and of its backlog (the web app's live gauges: catalog.metrics). A run
exports gauges of itself in groups (the backlog, the last run, the last success, the last skip on a busy lock), each
written whole to every sink the settings switch on. docs/operations.md lists them, their sinks, and why no counters.
"""

import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from prometheus_client import pushadd_to_gateway, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from config.logging import RunLog
from retention.backlog import Backlog
from retention.results import SUCCESSFUL_OUTCOMES, Outcome, PurgeResult

JOB = "catalog_delisted_retention"

LAST_RUN = "catalog_delisted_retention_last_run_timestamp_seconds"
LAST_RUN_OUTCOME = "catalog_delisted_retention_last_run_outcome"
LAST_RUN_INFO = "catalog_delisted_retention_last_run_info"
LAST_RUN_DURATION = "catalog_delisted_retention_run_duration_seconds"  # the design document's name
LAST_RUN_DELETED_CARDS = "catalog_delisted_retention_last_run_deleted_cards"
LAST_RUN_DELETED_OVERRIDES = "catalog_delisted_retention_last_run_deleted_overrides"
LAST_RUN_BATCHES = "catalog_delisted_retention_batches_processed"  # the design document's name
LAST_RUN_REPLICA_LAG_WAIT = "catalog_delisted_retention_last_run_replica_lag_wait_seconds"
MAX_RUN_DURATION = "catalog_delisted_retention_max_run_duration_seconds"
LAST_SUCCESS = "catalog_delisted_retention_last_success_timestamp_seconds"
LAST_LOCK_BUSY = "catalog_delisted_retention_last_lock_busy_timestamp_seconds"
BACKLOG = "catalog_delisted_backlog"
OLDEST_OVERDUE_AGE = "catalog_delisted_oldest_overdue_age_seconds"

HELP = {
    LAST_RUN: "When the last purge_delisted run that took the lock ended (Unix time).",
    LAST_RUN_OUTCOME: "The last run's outcome: 1 for it, 0 for the others.",
    LAST_RUN_INFO: "The last run's run_id and OpenTelemetry trace_id (empty when tracing is off); always 1.",
    LAST_RUN_DURATION: "How long the last run took.",
    LAST_RUN_DELETED_CARDS: "Cards the last run deleted, by kind (a failed run's committed batches included).",
    LAST_RUN_DELETED_OVERRIDES: "Display overrides (live and soft-deleted) the last run deleted with their cards.",
    LAST_RUN_BATCHES: "Batches the last run committed.",
    LAST_RUN_REPLICA_LAG_WAIT: "Time the last run spent waiting for lagging streaming standbys.",
    MAX_RUN_DURATION: "MaxRunDuration the last run had, for alerting on runs near it.",
    LAST_SUCCESS: "When a run last finished with outcome completed or has_more (Unix time).",
    LAST_LOCK_BUSY: "When a run was last skipped because another run held the advisory lock (Unix time).",
    BACKLOG: "Delisted catalog cards by kind; scope overdue: those past the retention cutoff.",
    OLDEST_OVERDUE_AGE: "How long the oldest overdue Delisted card of each kind has been past the retention cutoff "
    "(0 when none is overdue): the retention SLO.",
}

# A run that took the lock ends with one of these; a skip on a busy lock is not a run of its own here.
RUN_OUTCOMES = (Outcome.COMPLETED, Outcome.HAS_MORE, Outcome.STOPPED, Outcome.FAILED)
# The textfile of each group: the configured path for the last run, a sibling for each other group.
GROUP_FILES = {"last_run": "", "backlog": "_backlog", "last_success": "_last_success", "lock_busy": "_lock_busy"}
# The Pushgateway's socket timeout: a gateway that does not answer costs a run at most this, for each read.
EXPORT_TIMEOUT_SECONDS = 2


def gauge(name: str, samples: float | dict[tuple[str, ...], float], *labels: str) -> GaugeMetricFamily:
    """A gauge family: one sample, or samples keyed by the values of `labels`."""
    if not isinstance(samples, dict):
        return GaugeMetricFamily(name, HELP[name], value=samples)
    family = GaugeMetricFamily(name, HELP[name], labels=labels)
    for values, value in samples.items():
        family.add_metric(values, value)
    return family


def backlog_group(backlog: Backlog | None) -> list[Metric]:
    """Without a backlog, the families without samples (what the web collector announces)."""
    kinds = {"property_object": backlog.property_objects, "project": backlog.projects} if backlog else {}
    cards = {(kind, scope): getattr(count, scope) for kind, count in kinds.items() for scope in ("delisted", "overdue")}
    ages = {(kind,): count.days_past_due(backlog.cutoff) * 86_400 for kind, count in kinds.items()}
    return [gauge(BACKLOG, cards, "kind", "scope"), gauge(OLDEST_OVERDUE_AGE, ages, "kind")]


def last_run_group(result: PurgeResult, *, max_duration: timedelta, ended: float) -> list[Metric]:
    deleted = {("property_object",): result.deleted_property_object_cards, ("project",): result.deleted_project_cards}
    return [
        gauge(LAST_RUN, ended),
        gauge(LAST_RUN_OUTCOME, {(name,): float(result.outcome == name) for name in RUN_OUTCOMES}, "outcome"),
        gauge(LAST_RUN_INFO, {(str(result.run_id), result.trace_id or ""): 1}, "run_id", "trace_id"),
        gauge(LAST_RUN_DURATION, result.duration_seconds),
        gauge(LAST_RUN_DELETED_CARDS, deleted, "kind"),
        gauge(LAST_RUN_DELETED_OVERRIDES, result.deleted_overrides),
        gauge(LAST_RUN_BATCHES, result.batches_processed),
        gauge(LAST_RUN_REPLICA_LAG_WAIT, result.replica_lag_wait_seconds),
        gauge(MAX_RUN_DURATION, max_duration.total_seconds()),
    ]


@dataclass(frozen=True)
class Families(Collector):
    """Given metric families, what a textfile or a push exports instead of a registry: nothing of the process (or of
    other tests) leaks into it."""

    families: list[Metric]

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


@dataclass(frozen=True)
class Reading:
    """The samples a sink holds, by name and labels (the Pushgateway's job and instance left out)."""

    samples: dict[tuple[str, frozenset], float]

    @classmethod
    def parse(cls, exposition: str, *, group: dict[str, str] | None = None) -> "Reading":
        """With `group`, only the samples carrying all its labels (one group of a Pushgateway's page)."""
        samples = {}
        for family in text_string_to_metric_families(exposition):
            for sample in family.samples:
                if group is not None and any(sample.labels.get(name) != value for name, value in group.items()):
                    continue
                labels = {name: value for name, value in sample.labels.items() if name not in ("job", "instance")}
                samples[sample.name, frozenset(labels.items())] = sample.value
        return cls(samples)

    def value(self, name: str, **labels: str) -> float | None:
        return self.samples.get((name, frozenset(labels.items())))

    def labels(self, name: str) -> dict[str, str] | None:
        """The labels of the one sample of an info-style gauge."""
        return next((dict(labels) for named, labels in self.samples if named == name), None)


@dataclass(frozen=True)
class Textfile:
    path: Path

    def __str__(self) -> str:
        return f"textfile {self.path}"

    def path_of(self, group: str) -> Path:
        return self.path.with_name(f"{self.path.stem}{GROUP_FILES[group]}{self.path.suffix}")

    def read(self, timeout: float) -> Reading:
        paths = [self.path_of(group) for group in GROUP_FILES]
        return Reading.parse("".join(path.read_text() for path in paths if path.exists()))

    def write(self, groups: dict[str, list[Metric]], timeout: float) -> None:
        for group, families in groups.items():
            write_to_textfile(str(self.path_of(group)), Families(families))  # temp file + rename


@dataclass(frozen=True)
class Pushgateway:
    """One group of a Pushgateway: job `catalog_delisted_retention` and `instance`, so that environments sharing
    a gateway each keep their own series (PROMETHEUS_PUSHGATEWAY_INSTANCE)."""

    url: str
    instance: str

    def __str__(self) -> str:
        return f"Pushgateway {self.url} (instance {self.instance})"

    def read(self, timeout: float) -> Reading:
        base = self.url if "://" in self.url else f"http://{self.url}"
        with urllib.request.urlopen(f"{base.rstrip('/')}/metrics", timeout=timeout) as response:
            return Reading.parse(response.read().decode(), group={"job": JOB, "instance": self.instance})

    def write(self, groups: dict[str, list[Metric]], timeout: float) -> None:
        families = [family for group in groups.values() for family in group]
        pushadd_to_gateway(
            self.url, job=JOB, grouping_key={"instance": self.instance}, registry=Families(families),
            timeout=timeout,
        )


def configured_sinks() -> list[Textfile | Pushgateway]:
    sinks: list[Textfile | Pushgateway] = []
    if settings.DELISTED_RETENTION_METRICS_TEXTFILE:
        sinks.append(Textfile(Path(settings.DELISTED_RETENTION_METRICS_TEXTFILE)))
    if settings.PROMETHEUS_PUSHGATEWAY_URL:
        sinks.append(Pushgateway(settings.PROMETHEUS_PUSHGATEWAY_URL, settings.PROMETHEUS_PUSHGATEWAY_INSTANCE))
    return sinks


def export_backlog(backlog: Backlog, *, log: RunLog) -> None:
    """The backlog a run counted at its start (metrics never count on their own)."""
    export({"backlog": backlog_group(backlog)}, log=log)


def export_run(result: PurgeResult, backlog: Backlog | None, *, max_duration: timedelta, log: RunLog) -> None:
    """A run's end, once (a lock-busy skip and a failed run included), with the backlog it counted at its end."""
    ended = time.time()
    if result.outcome == Outcome.LOCK_BUSY:
        return export({"lock_busy": [gauge(LAST_LOCK_BUSY, ended)]}, log=log)
    groups = {"last_run": last_run_group(result, max_duration=max_duration, ended=ended)}
    if backlog is not None:
        groups["backlog"] = backlog_group(backlog)
    if result.outcome in SUCCESSFUL_OUTCOMES:
        groups["last_success"] = [gauge(LAST_SUCCESS, ended)]
    export(groups, log=log)


def export(groups: dict[str, list[Metric]], *, log: RunLog) -> None:
    """To every sink the settings switch on; a failure is a warning in the run's log, never a failed run."""
    for sink in configured_sinks():
        try:
            sink.write(groups, timeout=EXPORT_TIMEOUT_SECONDS)
        except Exception as error:
            log.warning("metrics not exported: %s", error, extra={"sink": str(sink)})

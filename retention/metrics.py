"""Prometheus metrics of the retention job (`purge_delisted`) and the live backlog on the web app's `/metrics`.

A cron process lives seconds, so a run hands its metrics over itself, in either or both of the two standard ways,
each switched on by a setting: a push to a Pushgateway (PROMETHEUS_PUSHGATEWAY_URL; `pushadd`, so a failed run
leaves the last success in place) and an atomic write (temp file + rename) of a node-exporter textfile
(DELISTED_RETENTION_METRICS_TEXTFILE). A metrics failure is a logged warning; it never fails the purge.

Counters and the duration histogram are cumulative across runs: each export reads back what the sink holds, adds
this run, and writes the sum, so `increase()` and `rate()` work as on any counter (a Pushgateway restarted without
persistence is an ordinary counter reset). Two exports racing (a lock-busy run beside the running one) can lose
one increment; that is the price of not running an aggregating gateway. Gauges hold the latest run's values. The
backlog the run counted at its start and at its end (there the cards within the retention window are the start's,
see measure_backlog), with the age of its oldest overdue card (the retention SLO), is exported with each. A failed
run exports its outcome, its duration and what its committed batches deleted. A sink holding garbage is rewritten
whole, with a warning; the whole export of a run is bounded by EXPORT_TIMEOUT_SECONDS.

The web app reports the backlog live through BacklogCollector (registered by the app config), cached so that
scrapes cannot hammer the database.
"""

import logging
import math
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from prometheus_client import CollectorRegistry, pushadd_to_gateway, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from config.logging import RunLog
from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.limits import PurgeLimits
from retention.results import SUCCESSFUL_OUTCOMES, Outcome, PurgeResult
from retention.session import Session

logger = logging.getLogger(__name__)

JOB = "catalog_delisted_retention"

RUN_DURATION = "catalog_delisted_retention_run_duration_seconds"
DELETED_PROPERTY_OBJECT_CARDS = "catalog_delisted_deleted_property_object_cards_total"
DELETED_PROJECT_CARDS = "catalog_delisted_deleted_project_cards_total"
DELETED_OVERRIDES = "catalog_delisted_deleted_overrides_total"
LOCK_CONTENTION = "catalog_delisted_retention_lock_contention_total"
RUNS = "catalog_delisted_retention_runs_total"
BATCHES_PROCESSED = "catalog_delisted_retention_batches_processed"
LAST_SUCCESS = "catalog_delisted_retention_last_success_timestamp_seconds"
MAX_RUN_DURATION = "catalog_delisted_retention_max_run_duration_seconds"
LAST_RUN = "catalog_delisted_retention_last_run_timestamp_seconds"
BACKLOG = "catalog_delisted_backlog"
REPLICA_LAG_WAIT = "catalog_delisted_retention_replica_lag_wait_seconds_total"
OLDEST_OVERDUE_AGE = "catalog_delisted_oldest_overdue_age_seconds"

HELP = {
    RUN_DURATION: "Duration of purge_delisted runs that took the lock (failed runs included).",
    DELETED_PROPERTY_OBJECT_CARDS: "Property object cards deleted by purge_delisted.",
    DELETED_PROJECT_CARDS: "Project cards deleted by purge_delisted.",
    DELETED_OVERRIDES: "Display overrides (live and soft-deleted) deleted with their cards by purge_delisted.",
    LOCK_CONTENTION: "purge_delisted runs skipped because another run held the advisory lock.",
    RUNS: "purge_delisted runs by outcome.",
    BATCHES_PROCESSED: "Batches the latest purge_delisted run committed.",
    LAST_SUCCESS: "When a purge_delisted run last finished with outcome completed or has_more (Unix time).",
    MAX_RUN_DURATION: "MaxRunDuration the latest purge_delisted run had, for alerting on runs near it.",
    LAST_RUN: "When the latest purge_delisted run ended (Unix time), labelled with its outcome.",
    BACKLOG: "Delisted catalog cards by kind; scope overdue: those past the retention cutoff.",
    REPLICA_LAG_WAIT: "Time purge_delisted runs spent waiting for lagging streaming standbys.",
    OLDEST_OVERDUE_AGE: "How long the oldest overdue Delisted card of each kind has been past the retention cutoff "
    "(0 when none is overdue): the retention SLO.",
}

COUNTERS = (DELETED_PROPERTY_OBJECT_CARDS, DELETED_PROJECT_CARDS, DELETED_OVERRIDES, LOCK_CONTENTION, REPLICA_LAG_WAIT)
GAUGES = (BATCHES_PROCESSED, LAST_SUCCESS, MAX_RUN_DURATION)


# Seconds; MaxRunDuration defaults to 1200.
DURATION_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 900, 1200, 1800, 3600, math.inf)
KINDS = ("property_object", "project")
BACKLOG_SERIES = tuple((kind, scope) for kind in KINDS for scope in ("delisted", "overdue"))
# One bound for a run's whole export, all sinks together: a gateway that accepts and never answers costs no more.
EXPORT_TIMEOUT_SECONDS = 2  # a sink that does not answer must not hold a stopped run past seconds
BACKLOG_CACHE_SECONDS = 30


def backlog_values(backlog: Backlog) -> dict[tuple[str, str], float]:
    return {
        ("property_object", "delisted"): backlog.property_objects.delisted,
        ("property_object", "overdue"): backlog.property_objects.overdue,
        ("project", "delisted"): backlog.projects.delisted,
        ("project", "overdue"): backlog.projects.overdue,
    }


def backlog_family(values: dict[tuple[str, str], float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(BACKLOG, HELP[BACKLOG], labels=["kind", "scope"])
    for (kind, scope), value in values.items():
        family.add_metric([kind, scope], value)
    return family


def oldest_overdue_age_values(backlog: Backlog) -> dict[str, float]:
    return {
        "property_object": backlog.property_objects.overdue_age(backlog.cutoff).total_seconds(),
        "project": backlog.projects.overdue_age(backlog.cutoff).total_seconds(),
    }


def oldest_overdue_age_family(values: dict[str, float]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(OLDEST_OVERDUE_AGE, HELP[OLDEST_OVERDUE_AGE], labels=["kind"])
    for kind, value in values.items():
        family.add_metric([kind], value)
    return family


@dataclass(eq=False)  # a registry keys collectors by identity
class JobMetrics(Collector):
    """The job's metrics as one sink holds them: counters and the histogram summed over every run the sink has
    seen, gauges as the latest run left them. Every outcome is always exported (zero until it happens), so the
    first failure is an increase, not the birth of a series."""

    runs: dict[str, float] = field(default_factory=lambda: dict.fromkeys(Outcome, 0.0))
    counters: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0.0))
    gauges: dict[str, float] = field(default_factory=dict)
    # Cumulative count per upper bound (a Pushgateway writes le="1" where this client writes le="1.0").
    duration_buckets: dict[float, float] = field(default_factory=lambda: dict.fromkeys(DURATION_BUCKETS, 0.0))
    duration_sum: float = 0.0
    backlog: dict[tuple[str, str], float] = field(default_factory=dict)
    oldest_overdue_age: dict[str, float] = field(default_factory=dict)
    last_run: tuple[str, float] | None = None  # (outcome, when it ended)

    @classmethod
    def parse(cls, exposition: str, *, group: dict[str, str] | None = None) -> "JobMetrics":
        """Read back an exposition; with `group`, only samples carrying all its labels (one group of a
        Pushgateway's page)."""
        metrics = cls()
        for family in text_string_to_metric_families(exposition):
            for sample in family.samples:
                labels = dict(sample.labels)
                if group is not None and any(labels.get(name) != value for name, value in group.items()):
                    continue
                metrics.read_sample(sample.name, labels, sample.value)
        return metrics

    def read_sample(self, name: str, labels: dict[str, str], value: float) -> None:
        if name in self.counters:
            self.counters[name] = value
        elif name in GAUGES:
            self.gauges[name] = value
        elif name == RUNS and labels.get("outcome") in self.runs:
            self.runs[Outcome(labels["outcome"])] = value
        elif name == f"{RUN_DURATION}_bucket" and float(labels.get("le", "nan")) in self.duration_buckets:
            self.duration_buckets[float(labels["le"])] = value
        elif name == f"{RUN_DURATION}_sum":
            self.duration_sum = value
        elif name == BACKLOG and (labels.get("kind"), labels.get("scope")) in BACKLOG_SERIES:
            self.backlog[labels["kind"], labels["scope"]] = value
        elif name == OLDEST_OVERDUE_AGE and labels.get("kind") in KINDS:
            self.oldest_overdue_age[labels["kind"]] = value
        elif name == LAST_RUN and labels.get("outcome") in self.runs:
            self.last_run = (labels["outcome"], value)

    def add_run(self, result: PurgeResult, *, max_duration: timedelta) -> None:
        """Count one run, a failed one included: what its committed batches deleted is final."""
        outcome = result.outcome
        self.runs[outcome] += 1
        self.last_run = (outcome, time.time())
        if outcome == Outcome.LOCK_BUSY:
            self.counters[LOCK_CONTENTION] += 1
            return
        self.observe_duration(result.duration_seconds)
        self.gauges[MAX_RUN_DURATION] = max_duration.total_seconds()
        self.counters[DELETED_PROPERTY_OBJECT_CARDS] += result.deleted_property_object_cards
        self.counters[DELETED_PROJECT_CARDS] += result.deleted_project_cards
        self.counters[DELETED_OVERRIDES] += result.deleted_overrides
        self.counters[REPLICA_LAG_WAIT] += result.replica_lag_wait_seconds
        self.gauges[BATCHES_PROCESSED] = result.batches_processed
        if outcome in SUCCESSFUL_OUTCOMES:
            self.gauges[LAST_SUCCESS] = time.time()

    def observe_duration(self, seconds: float) -> None:
        for bound in DURATION_BUCKETS:
            if seconds <= bound:
                self.duration_buckets[bound] += 1
        self.duration_sum += seconds

    def collect(self) -> Iterator[Metric]:
        runs = CounterMetricFamily(RUNS, HELP[RUNS], labels=["outcome"])
        for outcome, value in self.runs.items():
            runs.add_metric([outcome], value)
        yield runs
        for name, value in self.counters.items():
            yield CounterMetricFamily(name, HELP[name], value=value)
        for name, value in self.gauges.items():
            yield GaugeMetricFamily(name, HELP[name], value=value)
        buckets = [(floatToGoString(bound), count) for bound, count in self.duration_buckets.items()]
        yield HistogramMetricFamily(RUN_DURATION, HELP[RUN_DURATION], buckets=buckets, sum_value=self.duration_sum)
        if self.backlog:
            yield backlog_family(self.backlog)
        if self.oldest_overdue_age:
            yield oldest_overdue_age_family(self.oldest_overdue_age)
        if self.last_run is not None:
            outcome, ended = self.last_run
            last_run = GaugeMetricFamily(LAST_RUN, HELP[LAST_RUN], labels=["outcome"])
            last_run.add_metric([outcome], ended)
            yield last_run


def registry_of(metrics: JobMetrics) -> CollectorRegistry:
    """A registry of its own, so nothing of the process (or of other tests) leaks into the job's exposition."""
    registry = CollectorRegistry()
    registry.register(metrics)
    return registry


class CorruptSink(ValueError):
    """A sink holds something that is not the job's exposition."""


@dataclass(frozen=True)
class Textfile:
    path: Path

    def __str__(self) -> str:
        return f"textfile {self.path}"

    def read(self, timeout: float) -> JobMetrics:
        if not self.path.exists():
            return JobMetrics()
        try:
            return JobMetrics.parse(self.path.read_text())
        except (ValueError, UnicodeDecodeError) as error:
            raise CorruptSink(str(error)) from error

    def write(self, metrics: JobMetrics, timeout: float) -> None:
        write_to_textfile(str(self.path), registry_of(metrics))  # temp file beside it + rename


@dataclass(frozen=True)
class Pushgateway:
    """One group of a Pushgateway: job `catalog_delisted_retention` and `instance`, so that environments sharing
    a gateway each keep their own series (PROMETHEUS_PUSHGATEWAY_INSTANCE)."""

    url: str
    instance: str

    def __str__(self) -> str:
        return f"Pushgateway {self.url} (instance {self.instance})"

    def read(self, timeout: float) -> JobMetrics:
        base = self.url if "://" in self.url else f"http://{self.url}"
        with urllib.request.urlopen(f"{base.rstrip('/')}/metrics", timeout=timeout) as response:
            return JobMetrics.parse(response.read().decode(), group={"job": JOB, "instance": self.instance})

    def write(self, metrics: JobMetrics, timeout: float) -> None:
        pushadd_to_gateway(
            self.url, job=JOB, grouping_key={"instance": self.instance}, registry=registry_of(metrics),
            timeout=timeout,
        )


def configured_sinks() -> list[Textfile | Pushgateway]:
    sinks: list[Textfile | Pushgateway] = []
    if settings.DELISTED_RETENTION_METRICS_TEXTFILE:
        sinks.append(Textfile(Path(settings.DELISTED_RETENTION_METRICS_TEXTFILE)))
    if settings.PROMETHEUS_PUSHGATEWAY_URL:
        sinks.append(Pushgateway(settings.PROMETHEUS_PUSHGATEWAY_URL, settings.PROMETHEUS_PUSHGATEWAY_INSTANCE))
    return sinks


class RunMetrics:
    """The metrics of one run, handed to the sinks the settings switch on. The service measures the backlog itself
    (once at the start, once at the end) and hands each count over: metrics never count on their own.

    The service calls run_started once it holds the lock, then run_finished exactly once (a lock-busy skip and a
    failed run included). Its warnings go to the run's log (`log`), with the run's run_id.
    """

    def __init__(self, *, log: RunLog, max_duration: timedelta):
        self.sinks = configured_sinks()
        self.max_duration = max_duration
        self.log = log

    def run_started(self, backlog: Backlog) -> None:
        self.export(backlog=backlog)

    def run_finished(self, result: PurgeResult, backlog: Backlog | None = None) -> None:
        self.export(result=result, backlog=backlog)

    def export(self, *, result: PurgeResult | None = None, backlog: Backlog | None = None) -> None:
        # Socket timeouts bound each read, not a whole request (a gateway that drips a byte a second never trips
        # them), so each sink is exported in a daemon thread joined by the one deadline; a thread left behind dies
        # with the process.
        deadline = time.monotonic() + EXPORT_TIMEOUT_SECONDS
        for sink in self.sinks:
            left = deadline - time.monotonic()
            if left > 0:
                worker = threading.Thread(target=self.export_to, args=(sink, result, backlog, left), daemon=True)
                worker.start()
                worker.join(timeout=left)
                if not worker.is_alive():
                    continue
            self.log.warning(
                "metrics not exported: the export took its whole %s s", EXPORT_TIMEOUT_SECONDS,
                extra={"sink": str(sink), "timeout_seconds": EXPORT_TIMEOUT_SECONDS},
            )

    def export_to(
        self, sink: Textfile | Pushgateway, result: PurgeResult | None, backlog: Backlog | None, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        try:
            try:
                metrics = sink.read(timeout=timeout)
            except CorruptSink as error:
                self.log.warning("metrics sink unreadable, rewritten whole", extra={"sink": str(sink),
                                                                                   "error": str(error)})
                metrics = JobMetrics()
            if backlog is not None:
                metrics.backlog = backlog_values(backlog)
                metrics.oldest_overdue_age = oldest_overdue_age_values(backlog)
            if result is not None:
                metrics.add_run(result, max_duration=self.max_duration)
            sink.write(metrics, timeout=max(0.001, deadline - time.monotonic()))
        except Exception as error:
            self.log.warning(
                "metrics not exported: %s", error,
                extra={"sink": str(sink), "timeout_seconds": EXPORT_TIMEOUT_SECONDS},
            )


class BacklogCollector(Collector):
    """`catalog_delisted_backlog` and `catalog_delisted_oldest_overdue_age_seconds` for the web app's /metrics,
    measured at most once per `max_age_seconds` whatever the scrape rate, at the retention the settings give."""

    def __init__(self, *, max_age_seconds: float = BACKLOG_CACHE_SECONDS, clock: Callable[[], float] = time.monotonic):
        self.max_age_seconds = max_age_seconds
        self.clock = clock
        self.lock = threading.Lock()
        self.backlog: Backlog | None = None
        self.measured_at: float | None = None

    def describe(self) -> Iterator[Metric]:
        # Registering calls describe() instead of collect(): no database query at start-up.
        yield backlog_family({})
        yield oldest_overdue_age_family({})

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            if self.measured_at is None or self.clock() - self.measured_at >= self.max_age_seconds:
                self.measured_at = self.clock()
                self.backlog = self.measure_now()
            backlog = self.backlog
        if backlog is not None:
            yield backlog_family(backlog_values(backlog))
            yield oldest_overdue_age_family(oldest_overdue_age_values(backlog))

    def measure_now(self) -> Backlog | None:
        try:
            retention = PurgeLimits.from_settings().retention
            session = Session()
            return measure_backlog(session, cutoff=compute_cutoff(session, retention))
        except Exception as error:
            # A scrape must not fail: the series are absent until the next measurement works.
            logger.warning("catalog_delisted_backlog not measured: %s", error)
            return None

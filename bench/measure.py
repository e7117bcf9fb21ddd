"""The measurements: each starts workers (`bench/workers.py`) on fresh copies of the templates and keeps what they
report. `measure` runs them all and returns the `Results` the report is written from."""

import json
import logging
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from bench.databases import (
    PROJECT_ROOT, WORKER_TIMEOUT_SECONDS, create_database, drop_partial_indexes, prepare_templates,
)

logger = logging.getLogger(__name__)

# The command drains each backlog in one run; its per-run cap is not what the memory run measures.
UNCAPPED_BATCHES = "1000000"
KINDS = ("read", "upsert")
SCALING_RUNS = (
    # (template, with the partial indexes); the target compares the first two
    ("small", True),
    ("large", True),
    ("spread", True),
    ("small", False),
    ("large", False),
)


def worker_command(worker: str, url: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "bench.workers", worker, "--database-url", url, *options]


def run_worker(worker: str, url: str, *options: str) -> dict:
    completed = subprocess.run(
        worker_command(worker, url, *options), cwd=PROJECT_ROOT, capture_output=True, text=True, check=True,
        timeout=WORKER_TIMEOUT_SECONDS,
    )
    return json.loads(completed.stdout)


@dataclass(frozen=True)
class Run:
    """One purge (the job's or the floor's) on one database copy."""

    label: str
    deleted_cards: int
    seconds: float
    batch_seconds: list[float]

    @property
    def rows_per_second(self) -> float:
        return self.deleted_cards / self.seconds


def run_from_outcome(outcome: dict, label: str) -> Run:
    return Run(
        label=label, deleted_cards=outcome["deleted_cards"], seconds=outcome["finished"] - outcome["started"],
        batch_seconds=outcome["batch_seconds"],
    )


def timed_run(worker: str, url: str, label: str, *options: str) -> Run:
    return run_from_outcome(run_worker(worker, url, *options), label)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest rank: the smallest value with at least `fraction` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def measure_throughput(base_url: str, template: str, copy: str, *, batch_size: int, repeats: int):
    """Job and floor, alternating, each on a fresh copy of the same template."""
    jobs, floors = [], []
    for _ in range(repeats):
        jobs.append(timed_run("job", create_database(base_url, copy, template=template), "job",
                              "--batch-size", str(batch_size)))
        floors.append(timed_run("floor", create_database(base_url, copy, template=template), "floor",
                                "--batch-size", str(batch_size)))
    return jobs, floors


def measure_scaling(base_url: str, names: dict[str, str], copy: str, *, batch_size: int, repeats: int):
    """Per-batch latency of the job on each scaling template, with the partial indexes and without them."""
    runs: dict[tuple[str, bool], list[Run]] = {}
    for template, with_index in SCALING_RUNS:
        runs[template, with_index] = []
        # Without the index a batch costs a table scan: one run shows that well enough.
        for _ in range(repeats if with_index else 1):
            url = create_database(base_url, copy, template=names[template])
            if not with_index:
                drop_partial_indexes(url)
            label = f"{template}, {'partial index' if with_index else 'no partial index'}"
            runs[template, with_index].append(timed_run("job", url, label, "--batch-size", str(batch_size)))
    return runs


@dataclass(frozen=True)
class TrafficRound:
    """One round on a fresh copy: traffic latencies (seconds, by kind) alone, then while the purge ran."""

    purge: Run
    idle: dict[str, list[float]]
    during: dict[str, list[float]]

    @property
    def read_p99_ratio(self) -> float:
        return percentile(self.during["read"], 0.99) / percentile(self.idle["read"], 0.99)


@dataclass(frozen=True)
class LiveTraffic:
    label: str  # what purged: the job with a batch pause, or the floor
    rounds: list[TrafficRound]

    def pooled(self, window: str, kind: str) -> list[float]:
        return [seconds for one in self.rounds for seconds in getattr(one, window)[kind]]

    @property
    def median_read_p99_ratio(self) -> float:
        return statistics.median(one.read_p99_ratio for one in self.rounds)


def measure_live_traffic(
    base_url: str, template: str, copy: str, *, label: str, purge: tuple[str, ...], rounds: int,
    idle_seconds: float, reads_per_second: int, upserts_per_second: int,
) -> LiveTraffic:
    """Paced reads and upserts from a second process: first alone, then while a purge (`purge`: a worker and its
    options) empties the backlog; `rounds` times, each on a fresh copy."""
    return LiveTraffic(label=label, rounds=[
        traffic_round(base_url, template, copy, label=label, purge=purge, idle_seconds=idle_seconds,
                      reads_per_second=reads_per_second, upserts_per_second=upserts_per_second)
        for _ in range(rounds)
    ])


def traffic_round(
    base_url: str, template: str, copy: str, *, label: str, purge: tuple[str, ...], idle_seconds: float,
    reads_per_second: int, upserts_per_second: int,
) -> TrafficRound:
    url = create_database(base_url, copy, template=template)
    traffic = subprocess.Popen(
        worker_command("traffic", url, "--reads-per-second", str(reads_per_second),
                       "--upserts-per-second", str(upserts_per_second)),
        cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        if traffic.stderr.readline().strip() != "ready":  # Django is up and the card ids are loaded
            raise RuntimeError(f"the traffic worker did not start: {traffic.stderr.read()}")
        idle_from = time.monotonic() + 1.0  # one second of warm-up is not measured
        time.sleep(1.0 + idle_seconds)
        # The purge process's own start-up (imports) already competes for the CPU: idle ends at its launch.
        idle_until = time.monotonic()
        worker, *options = purge
        outcome = run_worker(worker, url, *options)
    finally:
        traffic.send_signal(signal.SIGTERM)
        try:
            stdout, _ = traffic.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            traffic.kill()
            raise
    idle, during = {kind: [] for kind in KINDS}, {kind: [] for kind in KINDS}
    for started, kind, seconds in json.loads(stdout)["samples"]:
        if idle_from <= started < idle_until:
            idle[kind].append(seconds)
        elif outcome["started"] <= started <= outcome["finished"]:
            during[kind].append(seconds)
    return TrafficRound(purge=run_from_outcome(outcome, label), idle=idle, during=during)


def peak_rss_of_command(url: str, *, batch_size: int) -> tuple[int, int]:
    """`manage.py purge_delisted` as its own process: (peak RSS in KiB from wait4's rusage, cards deleted)."""
    with tempfile.TemporaryFile(mode="w+") as stdout:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "purge_delisted", "--json", "--batch-size", str(batch_size),
             "--max-batches", UNCAPPED_BATCHES],
            cwd=PROJECT_ROOT, env=os.environ | {"DATABASE_URL": url}, stdout=stdout, stderr=subprocess.DEVNULL,
        )
        # wait4 reports this child alone; RUSAGE_CHILDREN would report the largest child so far.
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise RuntimeError(f"purge_delisted exited with {process.returncode}")
        stdout.seek(0)
        result = json.load(stdout)
    return usage.ru_maxrss, result["deleted_property_object_cards"] + result["deleted_project_cards"]


@dataclass(frozen=True)
class Results:
    sizes: dict[str, int]  # property-object cards per template
    backlogs: dict[str, int]  # overdue property objects per template
    jobs: list[Run]
    floors: list[Run]
    scaling: dict[tuple[str, bool], list[Run]]  # (template, with the partial indexes) -> runs
    live: list[LiveTraffic]  # the job at each batch pause (the first is the target's), then the floor
    rss: list[tuple[int, int, int]]  # (backlog, peak RSS in KiB, cards deleted), small backlog first

    @property
    def idle(self) -> dict[str, list[float]]:
        """Traffic alone, pooled over every round: the same condition whatever purge followed."""
        return {kind: [s for live in self.live for s in live.pooled("idle", kind)] for kind in KINDS}


def measure(base_url: str, names: dict[str, str], args) -> Results:
    sizes, backlogs = prepare_templates(base_url, names, args)
    logger.info("1. throughput: job vs floor")
    jobs, floors = measure_throughput(
        base_url, names["backlog_large"], names["run"], batch_size=args.batch_size, repeats=args.repeats
    )
    logger.info("2. scaling: small vs large table, with and without the partial indexes")
    scaling = measure_scaling(base_url, names, names["run"], batch_size=args.batch_size, repeats=args.repeats)
    batch_size = ("--batch-size", str(args.batch_size))
    # The job at each pause (the first is the target's), then the floor: what deleting alone costs the traffic.
    purges = [
        (f"job, pause {pause} ms", ("job", *batch_size, "--batch-pause-ms", str(pause))) for pause in args.pauses_ms
    ]
    purges.append(("raw-SQL floor", ("floor", *batch_size)))
    live = []
    for label, purge in purges:
        logger.info("3./5. live traffic, %s", label)
        live.append(measure_live_traffic(
            base_url, names["backlog_large"], names["run"], label=label, purge=purge, rounds=args.live_rounds,
            idle_seconds=args.idle_seconds, reads_per_second=args.reads_per_second,
            upserts_per_second=args.upserts_per_second,
        ))
    logger.info("4. peak RSS of the command")
    rss = []
    for name in ("backlog_small", "backlog_large"):
        url = create_database(base_url, names["run"], template=names[name])
        rss.append((backlogs[name], *peak_rss_of_command(url, batch_size=args.batch_size)))
    return Results(sizes=sizes, backlogs=backlogs, jobs=jobs, floors=floors, scaling=scaling, live=live, rss=rss)

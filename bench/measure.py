"""The measurements: each starts workers (`bench/workers.py`) on fresh copies of the templates and keeps what they
report. `measure` runs them all and returns the `Results` the report is written from.

Under live traffic two background workers load the copy while a purge runs: `traffic` (reads and upserts of
Published cards) and `restore` (source upserts restoring the overdue card a purge takes next).

The job of a base commit (`base_checkout`) runs beside this checkout's, by its own `bench/workers.py`, in pairs.
"""

import io
import json
import logging
import math
import os
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.databases import (
    PROJECT_ROOT, WORKER_TIMEOUT_SECONDS, create_database, database_url, drop_partial_indexes, prepare_templates,
)
from bench.workers import NO_METRICS

logger = logging.getLogger(__name__)

# The command drains each backlog in one run; its per-run cap is not what the memory run measures.
UNCAPPED_BATCHES = 1_000_000
KINDS = ("read", "upsert", "restore")
SCALING_RUNS = (
    # (template, with the partial indexes); the target compares the first two
    ("small", True),
    ("large", True),
    ("backlog_large", True),  # the throughput runs: the large backlog, spread thin over the large table
    ("small", False),
    ("large", False),
)
# The adaptive pause (pt-archiver's --sleep-coef): the bench measures it where the job offers it.
PAUSE_FACTOR_OPTION = "--batch-pause-factor"
PAUSE_FACTOR_SETTING = "DELISTED_RETENTION_BATCH_PAUSE_FACTOR"
# A paused job purges this many batches per round, not the whole backlog: at factor 30 the whole backlog took 4
# minutes a round, and a round's idle window (seconds) is only comparable with a purge window of similar length.
# At factor 60, 10 batches took 25-110 s a round depending on the host (a 19.6-min bench): 6 keep the bench
# within its 20 minutes.
PAUSED_BATCHES = 6
# The autocommit loop's batch: Sentry's `BulkDeleteQuery.execute_postgres(chunk_size=10000)`.
SENTRY_CHUNK_SIZE = 10_000
# What the one-shot buys (a study, one run each on the peers catalog): the floor at other batch sizes, with its
# cards deleted in physical order, with no batches at all, and the one-shot itself. (label, worker and options)
ONE_SHOT_STUDY = (
    ("floor, batch 2,000", ("floor", "--batch-size", "2000")),
    ("floor, batch 10,000", ("floor", "--batch-size", "10000")),
    ("floor, batch 50,000", ("floor", "--batch-size", "50000")),
    ("floor, batch 2,000, cards deleted in ctid order", ("floor", "--batch-size", "2000", "--delete-by", "ctid")),
    ("floor, one statement a phase (no LIMIT)", ("floor", "--batch-size", "all")),
    ("one-shot queryset.delete() (no locking CTE, no order)", ("oneshot",)),
)


def worker_command(worker: str, url: str, *options: str) -> list[str]:
    return [sys.executable, "-m", "bench.workers", worker, "--database-url", url, *options]


def run_worker(
    worker: str, url: str, *options: str, env: dict[str, str] | None = None, root: Path = PROJECT_ROOT,
) -> dict:
    """A worker of the checkout at `root` (this one, or the base's), with this interpreter and its packages. A worker
    that fails ends the bench with the end of its stderr (its traceback)."""
    completed = subprocess.run(
        worker_command(worker, url, *options), cwd=root, capture_output=True, text=True,
        timeout=WORKER_TIMEOUT_SECONDS, env=os.environ | (env or {}),
    )
    if completed.returncode:
        raise RuntimeError(f"the {worker} worker in {root} exited {completed.returncode}: {completed.stderr[-3000:]}")
    return json.loads(completed.stdout)


@dataclass(frozen=True)
class BaseCode:
    """The files of the base commit, whose job this checkout's is compared with."""

    commit: str  # abbreviated
    root: Path


@contextmanager
def base_checkout(ref: str) -> Iterator[BaseCode]:
    """The files of commit `ref` (`git archive`) in a temporary directory, removed afterwards: its workers run from
    there, so its own bench/workers.py times its own job."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short=7", f"{ref}^{{commit}}"], cwd=PROJECT_ROOT, capture_output=True, text=True,
        check=True,
    ).stdout.strip()
    archive = subprocess.run(["git", "archive", commit], cwd=PROJECT_ROOT, capture_output=True, check=True).stdout
    with tempfile.TemporaryDirectory(prefix=f"bench-base-{commit}-") as directory:
        with tarfile.open(fileobj=io.BytesIO(archive)) as files:
            files.extractall(directory, filter="data")
        yield BaseCode(commit=commit, root=Path(directory))


@dataclass(frozen=True)
class Purge:
    """What purges in a live-traffic round: a worker with its options, and settings for its environment."""

    label: str
    worker: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    adaptive: bool = False  # the job with a pause factor
    root: Path = PROJECT_ROOT  # the checkout whose worker runs: this one, or the base's


@dataclass(frozen=True)
class Load:
    """The background load of a live-traffic round, and how long it runs alone first."""

    reads_per_second: int
    upserts_per_second: int
    restores_per_second: float
    idle_seconds: float


@dataclass(frozen=True)
class Run:
    """One purge (the job's or the floor's) on one database copy."""

    label: str
    deleted_cards: int
    seconds: float
    batch_seconds: list[float]
    longest_transaction: float  # of every transaction of the run, the ones that deleted nothing too
    cpu_seconds: float | None = None  # the job's process, all its threads; the floor's is not measured

    @property
    def rows_per_second(self) -> float:
        return self.deleted_cards / self.seconds


def run_from_outcome(outcome: dict, label: str) -> Run:
    return Run(
        label=label, deleted_cards=outcome["deleted_cards"], seconds=outcome["finished"] - outcome["started"],
        batch_seconds=outcome["batch_seconds"], longest_transaction=outcome["longest_transaction"],
        cpu_seconds=outcome.get("cpu_seconds"),
    )


def timed_run(worker: str, url: str, label: str, *options: str) -> Run:
    return run_from_outcome(run_worker(worker, url, *options), label)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest rank: the smallest value with at least `fraction` of the values at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


@dataclass(frozen=True)
class Throughput:
    jobs: list[Run]
    floors: list[Run]


@dataclass(frozen=True)
class Pairs:
    """This checkout's job and the base commit's, in pairs on fresh copies of one template."""

    commit: str  # the base commit
    this: list[Run]
    base: list[Run]


def measure_pairs(base_url: str, template: str, copy: str, *, base: BaseCode, batch_size: int, pairs: int) -> Pairs:
    """`pairs` pairs, each run on a fresh copy: this job then the base's, then the other way round (ABBA), so that
    neither always runs first."""
    this_runs, base_runs = [], []
    order = [(this_runs, "this code", PROJECT_ROOT), (base_runs, f"base {base.commit}", base.root)]
    for _ in range(pairs):
        for runs, label, root in order:
            url = create_database(base_url, copy, template=template)
            runs.append(run_from_outcome(run_worker("job", url, "--batch-size", str(batch_size), root=root), label))
        order.reverse()
    return Pairs(commit=base.commit, this=this_runs, base=base_runs)


def measure_throughput(base_url: str, template: str, copy: str, *, batch_size: int, repeats: int) -> Throughput:
    """Job and floor, alternating, each on a fresh copy of the same template."""
    jobs, floors = [], []
    for _ in range(repeats):
        jobs.append(timed_run("job", create_database(base_url, copy, template=template), "job",
                              "--batch-size", str(batch_size)))
        floors.append(timed_run("floor", create_database(base_url, copy, template=template), "floor",
                                "--batch-size", str(batch_size)))
    return Throughput(jobs=jobs, floors=floors)


@dataclass(frozen=True)
class TracingCost:
    """The job with tracing off and on (exporting to a local OTLP receiver), alternating, on copies of one template."""

    off: list[Run]
    on: list[Run]
    spans: int  # what the receiver got from the runs with tracing on


def measure_tracing(base_url: str, template: str, copy: str, *, batch_size: int, rounds: int) -> TracingCost:
    """Off, then on, `rounds` times, each on a fresh copy: the on runs export every span (the statements' included)
    to a receiver in this process, as to a collector next to the job. Their exit flush is outside the timed run."""
    from tests.tracing.receiver import running_receiver

    off, on = [], []
    with running_receiver() as receiver:
        for _ in range(rounds):
            for runs, env in ((off, {}), (on, receiver.env())):
                url = create_database(base_url, copy, template=template)
                runs.append(run_from_outcome(
                    run_worker("job", url, "--batch-size", str(batch_size), env=env),
                    "tracing on" if env else "tracing off",
                ))
        spans = len(receiver.spans)
    return TracingCost(off=off, on=on, spans=spans)


def measure_scaling(
    base_url: str, names: dict[str, str], copy: str, *, batch_size: int, repeats: int, throughput_jobs: list[Run],
):
    """Per-batch latency of the job on each scaling template, with the partial indexes and without them."""
    runs: dict[tuple[str, bool], list[Run]] = {}
    for template, with_index in SCALING_RUNS:
        if template == "backlog_large":
            runs[template, with_index] = throughput_jobs
            continue
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
    """One round on a fresh copy: background latencies (seconds, by kind) alone, then while the purge ran."""

    purge: Run
    idle: dict[str, list[float]]
    during: dict[str, list[float]]

    @property
    def read_p99_ratio(self) -> float:
        return percentile(self.during["read"], 0.99) / percentile(self.idle["read"], 0.99)


@dataclass(frozen=True)
class LiveTraffic:
    label: str  # what purged: the job with a batch pause, the floor, a peer
    rounds: list[TrafficRound]
    adaptive: bool = False  # the job with a pause factor

    def pooled(self, window: str, kind: str) -> list[float]:
        return [seconds for one in self.rounds for seconds in getattr(one, window)[kind]]

    @property
    def median_read_p99_ratio(self) -> float:
        return statistics.median(one.read_p99_ratio for one in self.rounds)


def pooled_idle(traffic: list[LiveTraffic]) -> dict[str, list[float]]:
    """The background load alone, pooled over every round: the same condition whatever purge followed."""
    return {kind: [seconds for live in traffic for seconds in live.pooled("idle", kind)] for kind in KINDS}


def measure_live_traffic(
    base_url: str, template: str, copy: str, *, purges: list[Purge], load: Load, rounds: int
) -> list[LiveTraffic]:
    """The background load, first alone, then while a purge empties the backlog, each on a fresh copy; `rounds`
    rounds of every purge, interleaved (each round runs every purge once, in turn, every other round in the reverse
    order), so a drift of the host's other load over the minutes of the measurement falls on every purge alike."""
    played = [[] for _ in purges]
    for round_number in range(1, rounds + 1):
        turns = list(zip(purges, played))
        for purge, purge_rounds in turns if round_number % 2 else reversed(turns):
            logger.info("round %d of %d: %s", round_number, rounds, purge.label)
            purge_rounds.append(traffic_round(base_url, template, copy, purge=purge, load=load))
    return [
        LiveTraffic(label=purge.label, adaptive=purge.adaptive, rounds=purge_rounds)
        for purge, purge_rounds in zip(purges, played)
    ]


def traffic_round(base_url: str, template: str, copy: str, *, purge: Purge, load: Load) -> TrafficRound:
    url = create_database(base_url, copy, template=template)
    background = [
        start_background("traffic", url, "--reads-per-second", str(load.reads_per_second),
                         "--upserts-per-second", str(load.upserts_per_second)),
        start_background("restore", url, "--restores-per-second", str(load.restores_per_second)),
    ]
    try:
        for process in background:
            if process.stderr.readline().strip() != "ready":  # Django is up and the cards are chosen
                raise RuntimeError(f"a background worker did not start: {process.stderr.read()}")
        idle_from = time.monotonic() + 1.0  # one second of warm-up is not measured
        time.sleep(1.0 + load.idle_seconds)
        # The purge process's own start-up (imports) already competes for the CPU: idle ends at its launch.
        idle_until = time.monotonic()
        worker, *options = purge.worker
        outcome = run_worker(worker, url, *options, env=purge.env, root=purge.root)
    finally:
        outputs = [stop_background(process) for process in background]
    idle, during = {kind: [] for kind in KINDS}, {kind: [] for kind in KINDS}
    for started, kind, seconds in (sample for output in outputs for sample in json.loads(output)["samples"]):
        if idle_from <= started < idle_until:
            idle[kind].append(seconds)
        elif outcome["started"] <= started <= outcome["finished"]:
            during[kind].append(seconds)
    return TrafficRound(purge=run_from_outcome(outcome, purge.label), idle=idle, during=during)


def start_background(worker: str, url: str, *options: str) -> subprocess.Popen:
    return subprocess.Popen(
        worker_command(worker, url, *options), cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


def stop_background(process: subprocess.Popen) -> str:
    """SIGTERM, then its stdout (its samples)."""
    process.send_signal(signal.SIGTERM)
    try:
        stdout, _ = process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return stdout


def peer_purges(batch_size: tuple[str, str], base: BaseCode) -> dict[str, Purge]:
    """The purges of section 6 by worker: the job, the base commit's job next to it (`base`), and the floor beside the
    peers (bench/peers.py)."""
    return {
        "job": Purge("this job", ("job", *batch_size)),
        "base": Purge(f"the job at {base.commit} (base)", ("job", *batch_size), root=base.root),
        "floor": Purge("raw-SQL floor", ("floor", *batch_size)),
        "naive": Purge("naive Django batches", ("naive", *batch_size)),
        "oneshot": Purge("one-shot queryset.delete()", ("oneshot",)),
        "sentry": Purge("autocommit DELETE ... LIMIT loop", ("sentry", "--batch-size", str(SENTRY_CHUNK_SIZE))),
    }


def job_has_option(url: str, option: str) -> bool:
    """Whether this checkout's `manage.py purge_delisted --help` lists `option`."""
    completed = subprocess.run(
        [sys.executable, "manage.py", "purge_delisted", "--help"], cwd=PROJECT_ROOT,
        env=os.environ | {"DATABASE_URL": url}, capture_output=True, text=True, check=True,
        timeout=WORKER_TIMEOUT_SECONDS,
    )
    return option in completed.stdout.split()


def peak_rss_of_command(url: str, *, batch_size: int, max_batches: int) -> tuple[int, int]:
    """`manage.py purge_delisted` as its own process: (peak RSS in KiB from wait4's rusage, cards deleted)."""
    with tempfile.TemporaryFile(mode="w+") as stdout:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "purge_delisted", "--json", "--batch-size", str(batch_size),
             "--max-batches", str(max_batches)],
            cwd=PROJECT_ROOT, env=os.environ | NO_METRICS | {"DATABASE_URL": url}, stdout=stdout,
            stderr=subprocess.DEVNULL,
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
class AdminPage:
    label: str
    path: str
    seconds: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


@dataclass(frozen=True)
class Results:
    sizes: dict[str, int]  # property-object cards per template
    backlogs: dict[str, int]  # overdue property objects per template
    throughput: dict[str, Throughput]  # by template: backlog_large, backlog_small
    scaling: dict[tuple[str, bool], list[Run]]  # (template, with the partial indexes) -> runs
    live: list[LiveTraffic]  # the job at each pause and pause factor (the first factor is the target's), the floor
    unmeasured: list[tuple[str, str]]  # (live-traffic purge, why it was not measured)
    peers: dict[str, LiveTraffic]  # by worker (peer_purges): the job, the base's, the floor, the other shapes
    pairs: Pairs  # this job and the base's on the backlog_large template
    one_shot_study: list[Run]  # ONE_SHOT_STUDY's runs, in its order
    rss: list[tuple[int, int, int]]  # (max batches, peak RSS in KiB, cards deleted), the shorter run first
    admin_pages: list[AdminPage]  # the admin index first
    tracing: TracingCost  # on the backlog_large template


def measure(base_url: str, names: dict[str, str], args, base: BaseCode) -> Results:
    sizes, backlogs = prepare_templates(base_url, names, args)
    batch_size = ("--batch-size", str(args.batch_size))
    throughput = {}
    for template in ("backlog_large", "backlog_small"):
        logger.info("1. throughput: job vs floor, %s", names[template])
        throughput[template] = measure_throughput(
            base_url, names[template], names["run"], batch_size=args.batch_size, repeats=args.repeats
        )
    logger.info("1. this job vs the job at %s, in pairs", base.commit)
    pairs = measure_pairs(
        base_url, names["backlog_large"], names["run"], base=base, batch_size=args.batch_size, pairs=args.base_pairs
    )
    logger.info("2. scaling: small vs large table, with and without the partial indexes")
    scaling = measure_scaling(
        base_url, names, names["run"], batch_size=args.batch_size, repeats=args.repeats,
        throughput_jobs=throughput["backlog_large"].jobs,
    )

    # The job at each pause and pause factor (the first factor is the live-read target's), then the floor: what
    # deleting alone costs the traffic.
    live_purges = [
        Purge(f"job, pause {pause} ms", ("job", *batch_size, "--batch-pause-ms", str(pause)))
        for pause in args.pauses_ms
    ]
    factor_labels = [f"job, pause factor {factor:g}" for factor in args.pause_factors]
    unmeasured = []
    if job_has_option(database_url(base_url, names["small"]), PAUSE_FACTOR_OPTION):
        live_purges += [
            Purge(label, ("job", *batch_size, "--max-batches", str(PAUSED_BATCHES)),
                  env={PAUSE_FACTOR_SETTING: str(factor)}, adaptive=True)
            for label, factor in zip(factor_labels, args.pause_factors)
        ]
    else:
        unmeasured = [(label, f"`purge_delisted --help` lists no `{PAUSE_FACTOR_OPTION}`") for label in factor_labels]
    live_purges.append(Purge("raw-SQL floor", ("floor", *batch_size)))
    load = Load(
        reads_per_second=args.reads_per_second, upserts_per_second=args.upserts_per_second,
        restores_per_second=args.restores_per_second, idle_seconds=args.idle_seconds,
    )
    logger.info("3./5. live traffic")
    live = measure_live_traffic(
        base_url, names["backlog_large"], names["run"], purges=live_purges, load=load, rounds=args.live_rounds
    )
    logger.info("6. peers under live traffic")
    purges = peer_purges(batch_size, base)
    peers = dict(zip(purges, measure_live_traffic(
        base_url, names["peers"], names["run"], purges=list(purges.values()), load=load, rounds=args.peer_rounds
    )))
    logger.info("6. what the one-shot buys")
    one_shot_study = [
        timed_run(worker, create_database(base_url, names["run"], template=names["peers"]), label, *options)
        for label, (worker, *options) in ONE_SHOT_STUDY
    ]

    logger.info("4. peak RSS of the command")
    rss = []
    for max_batches in (math.ceil(args.backlogs[0] / args.batch_size), UNCAPPED_BATCHES):
        url = create_database(base_url, names["run"], template=names["backlog_large"])
        rss.append((max_batches, *peak_rss_of_command(url, batch_size=args.batch_size, max_batches=max_batches)))

    logger.info("7. admin pages")
    url = create_database(base_url, names["run"], template=names["admin"])
    admin_pages = [
        AdminPage(label, path, seconds)
        for label, path, seconds in run_worker("admin", url, "--repeats", str(args.admin_repeats))["pages"]
    ]
    logger.info("8. tracing on vs off")
    # The large backlog: runs long enough that the neighbours' load does not swamp a few per cent.
    tracing = measure_tracing(
        base_url, names["backlog_large"], names["run"], batch_size=args.batch_size, rounds=args.tracing_rounds,
    )
    logger.info("done")
    return Results(
        sizes=sizes, backlogs=backlogs, throughput=throughput, scaling=scaling, live=live, unmeasured=unmeasured,
        peers=peers, pairs=pairs, one_shot_study=one_shot_study, rss=rss, admin_pages=admin_pages, tracing=tracing,
    )

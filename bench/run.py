"""`make bench`: purge_delisted against the raw-SQL floor and against the job of a base commit, its scaling, its
footprint on live traffic, its memory, other shapes of the same purge (peers), and the admin pages.

Every measurement runs on a fresh copy (`CREATE DATABASE ... TEMPLATE`) of a seeded template, so the job and
the floor, or two runs of the job, meet identical data. The templates are demo data (`manage.py seed_demo_data`)
whose backlog is then set to an exact size (`bench/databases.py`). The job and the traffic run in their own
processes (`bench/workers.py`), started by the measurements (`bench/measure.py`); the base commit's job
(`--base-ref`) runs from that commit's files (`git archive` into a temporary directory), timed by its own
`bench/workers.py`. This script runs them and writes the report (`docs/benchmarks.md`, from
`bench/report_template.md`) and the chart (`bench/report.py`). It exits 1 when a target is missed (a row shown for
information never is).

All databases are named `<prefix>_*` (default: `bench_` + the database of DATABASE_URL) and dropped at the end.
"""

import argparse
import logging
import os
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from bench.databases import PROJECT_ROOT, drop_database, server_description
from bench.measure import base_checkout, measure
from bench.report import draw_chart, evaluate_targets, render_report

logger = logging.getLogger("bench")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True, help="the server to use; its database names the prefix")
    parser.add_argument("--prefix", help="database name prefix (default: bench_<database of the URL>)")
    parser.add_argument("--small-cards", type=int, default=100_000, help="property objects of the small catalog")
    parser.add_argument("--large-cards", type=int, default=10_000_000, help="property objects of the large catalog")
    parser.add_argument("--backlogs", type=int, nargs=2, default=(20_000, 200_000), metavar=("SMALL", "LARGE"),
                        help="cards the short memory run deletes; overdue property objects of the large backlog "
                             "(1, 3-5)")
    parser.add_argument("--small-throughput-cards", type=int, default=300_000,
                        help="property objects of the small throughput catalog (1)")
    parser.add_argument("--small-throughput-backlog", type=int, default=60_000, help="its overdue property objects")
    parser.add_argument("--peer-cards", type=int, default=2_000_000, help="property objects of the peers catalog (6)")
    parser.add_argument("--peer-backlog", type=int, default=400_000, help="its overdue property objects")
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement in 1 and 2")
    parser.add_argument("--pauses-ms", type=int, nargs="+", default=(0,),
                        help="--batch-pause-ms values for 3 and 5")
    parser.add_argument("--pause-factors", type=float, nargs="+", default=(60.0,),
                        help="--batch-pause-factor values for 5, where purge_delisted has the option; the first "
                             "one is the live-read target's (else the first pause)")
    parser.add_argument("--live-rounds", type=int, default=4, help="rounds per purge in 3 and 5")
    parser.add_argument("--peer-rounds", type=int, default=5, help="rounds per purge in 6")
    # 3,200 reads at 400/s: with 4 s (1,600) a round's idle p99 alone moved by ±20 % between rounds.
    parser.add_argument("--idle-seconds", type=float, default=8.0, help="the load alone before each purge")
    parser.add_argument("--reads-per-second", type=int, default=400)
    parser.add_argument("--upserts-per-second", type=int, default=40)
    parser.add_argument("--restores-per-second", type=float, default=10)
    parser.add_argument("--admin-cards", type=int, default=1_000_000, help="property objects of the admin catalog")
    parser.add_argument("--admin-backlog", type=int, default=200_000, help="its overdue property objects")
    parser.add_argument("--admin-repeats", type=int, default=10, help="timed rounds over the admin pages")
    parser.add_argument("--tracing-rounds", type=int, default=4, help="runs with tracing off and on, each, in 8")
    parser.add_argument("--base-ref", default="5166042",
                        help="the commit whose job this checkout's is compared with, in pairs (1, 6)")
    parser.add_argument("--base-pairs", type=int, default=6, help="pairs of this job and the base's in 1")
    parser.add_argument("--output", type=Path, default=PROJECT_ROOT / "docs" / "benchmarks.md")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    # Progress of every bench module to stderr; stdout carries the report.
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    started = time.monotonic()
    prefix = args.prefix or f"bench_{urlsplit(args.database_url).path.lstrip('/')}"
    templates = ("small", "large", "backlog_large", "backlog_small", "peers", "admin")
    names = {kind: f"{prefix}_{kind}" for kind in (*templates, "run")}
    try:
        with base_checkout(args.base_ref) as base:
            results = measure(args.database_url, names, args, base)
    finally:
        for name in names.values():
            drop_database(args.database_url, name)

    chart = args.output.with_name("benchmarks-batch-latency.png")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    draw_chart(chart, results)
    targets = evaluate_targets(results)
    host = {
        "cores": str(os.cpu_count()),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "server": server_description(args.database_url),
    }
    report = render_report(
        results, targets, args=args, chart_name=chart.name, elapsed=time.monotonic() - started,
        written=datetime.now(timezone.utc), host=host,
    )
    args.output.write_text(report)
    print(report)
    logger.info("wrote %s and %s", args.output, chart)
    return 1 if any(target.failed for target in targets) else 0


if __name__ == "__main__":
    sys.exit(main())

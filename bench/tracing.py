"""`make bench-tracing`: section 8 of `make bench` alone, what tracing costs the job. A template of its own (1M
cards by default, for runs of a few seconds), the job with tracing off and on alternating on fresh copies of it,
the target and the table printed as `make bench` writes them into docs/benchmarks.md. Its databases are dropped at
the end."""

import argparse
import logging
import sys
from urllib.parse import urlsplit

from bench.databases import SEED, drop_database, seeded_catalog, table_size, database_url
from bench.measure import measure_tracing
from bench.report import TARGETS, targets_table, tracing_cpu, tracing_table, tracing_target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--database-url", required=True, help="the server to use; its database names the prefix")
    parser.add_argument("--cards", type=int, default=1_000_000, help="property objects of the catalog")
    parser.add_argument("--backlog", type=int, default=150_000, help="its overdue property objects")
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=4, help="runs with tracing off and on, each")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="[bench %(asctime)s] %(message)s", datefmt="%H:%M:%S")
    prefix = f"bench_{urlsplit(args.database_url).path.lstrip('/')}_tracing"
    template, copy = f"{prefix}_template", f"{prefix}_run"
    try:
        overdue = seeded_catalog(args.database_url, template, cards=args.cards, overdue=args.backlog, seed=SEED + 3)
        cards = table_size(database_url(args.database_url, template))
        tracing = measure_tracing(args.database_url, template, copy, batch_size=args.batch_size, rounds=args.rounds)
    finally:
        for name in (template, copy):
            drop_database(args.database_url, name)
    target = tracing_target(tracing, cards, overdue)
    print("\n".join([*targets_table([target]), "", *tracing_table(tracing), "", tracing_cpu(tracing)]))
    print(f"\n{tracing.spans:,} spans received; target ≥ {TARGETS['tracing']}")
    return 0 if target.passed else 1


if __name__ == "__main__":
    sys.exit(main())

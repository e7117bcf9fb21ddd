"""The report (`docs/benchmarks.md`) and its chart: the targets judged, the tables, and the prose of
`report_template.md` with the run's figures filled in. The hand-written findings live in
`docs/benchmark-findings.md`, which no run rewrites."""

import statistics
from dataclasses import dataclass
from pathlib import Path
from string import Template

from bench.measure import KINDS, UNCAPPED_BATCHES, Results, Run, percentile

TEMPLATE = Path(__file__).with_name("report_template.md")
TARGETS = {
    "throughput": 0.8,  # job rows/s ÷ floor rows/s, at least
    "scaling": 1.5,  # batch p50 at the large table ÷ at the small one, at most
    "live_read": 1.5,  # live-read p99 during the purge ÷ idle, at most
    "rss_growth_mb": 20.0,  # peak RSS at the large backlog − at the small one, at most
}
SCALING_LABELS = {
    "small": "small demo catalog",
    "large": "same backlog, table grown",
    "spread": "same count, spread thin",
}


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    goal: str
    passed: bool


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def batch_percentiles(runs: list[Run]) -> tuple[float, float]:
    batches = [seconds for run in runs for seconds in run.batch_seconds]
    return percentile(batches, 0.5), percentile(batches, 0.99)


def evaluate_targets(results: Results) -> list[Target]:
    job_rate = statistics.median(run.rows_per_second for run in results.jobs)
    floor_rate = statistics.median(run.rows_per_second for run in results.floors)
    small_p50, _ = batch_percentiles(results.scaling["small", True])
    large_p50, _ = batch_percentiles(results.scaling["large", True])
    default_live = results.live[0]
    read_ratio = default_live.median_read_p99_ratio
    round_ratios = ", ".join(f"{one.read_p99_ratio:.2f}" for one in default_live.rounds)
    (small_backlog, small_rss, _), (large_backlog, large_rss, _) = results.rss
    growth_mb = (large_rss - small_rss) / 1024
    sizes = results.sizes
    return [
        Target(
            "job throughput ÷ raw-SQL floor",
            f"**{job_rate / floor_rate:.2f}** ({job_rate:,.0f} vs {floor_rate:,.0f} rows/s)",
            f"≥ {TARGETS['throughput']}", job_rate / floor_rate >= TARGETS["throughput"],
        ),
        Target(
            f"batch p50 at {sizes['large']:,} ÷ at {sizes['small']:,} cards",
            f"**{large_p50 / small_p50:.2f}** ({milliseconds(large_p50)} vs {milliseconds(small_p50)})",
            f"≤ {TARGETS['scaling']}", large_p50 / small_p50 <= TARGETS["scaling"],
        ),
        Target(
            f"live-read p99 during the purge ({default_live.label}) ÷ idle, median of rounds",
            f"**{read_ratio:.2f}** (rounds: {round_ratios})",
            f"≤ {TARGETS['live_read']}", read_ratio <= TARGETS["live_read"],
        ),
        Target(
            f"peak RSS growth, backlog {small_backlog:,} → {large_backlog:,}",
            f"**{growth_mb:+.1f} MB** ({small_rss / 1024:.1f} → {large_rss / 1024:.1f} MB)",
            f"≤ {TARGETS['rss_growth_mb']:.0f} MB", growth_mb <= TARGETS["rss_growth_mb"],
        ),
    ]


def targets_table(targets: list[Target]) -> list[str]:
    lines = ["| target | measured | goal | result |", "|---|---|---|---|"]
    for target in targets:
        lines.append(
            f"| {target.name} | {target.measured} | {target.goal} | {'**pass**' if target.passed else '**FAIL**'} |"
        )
    return lines


def throughput_table(results: Results) -> list[str]:
    lines = ["| run | cards deleted | seconds | rows/s | batch p50 | batch p99 |", "|---|---|---|---|---|---|"]
    for run in [*results.jobs, *results.floors]:
        p50, p99 = batch_percentiles([run])
        lines.append(
            f"| {run.label} | {run.deleted_cards:,} | {run.seconds:.2f} | {run.rows_per_second:,.0f} "
            f"| {milliseconds(p50)} | {milliseconds(p99)} |"
        )
    return lines


def scaling_table(results: Results) -> list[str]:
    sizes, backlogs = results.sizes, results.backlogs
    lines = [
        "| catalog | property-object cards | overdue | partial indexes | batches | batch p50 | batch p99 "
        "| rows/s (median run) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (template, with_index), runs in results.scaling.items():
        p50, p99 = batch_percentiles(runs)
        lines.append(
            f"| {SCALING_LABELS[template]} | {sizes[template]:,} | {backlogs[template]:,} "
            f"| {'yes' if with_index else 'dropped'} | {sum(len(run.batch_seconds) for run in runs)} "
            f"| {milliseconds(p50)} | {milliseconds(p99)} "
            f"| {statistics.median(run.rows_per_second for run in runs):,.0f} |"
        )
    return lines


def live_table(results: Results) -> list[str]:
    idle = results.idle
    lines = [
        "| purge | read p50 | read p99 | read p99 ÷ idle, per round | upsert p50 | upsert p99 "
        "| longest batch (≥ longest row-lock hold) | purge run (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    idle_cells = [milliseconds(percentile(idle[kind], fraction)) for kind in KINDS for fraction in (0.5, 0.99)]
    lines.append(f"| idle (no purge) | {idle_cells[0]} | {idle_cells[1]} | | {idle_cells[2]} | {idle_cells[3]} | | |")
    for live in results.live:
        cells = {}
        for kind in KINDS:
            for fraction in (0.5, 0.99):
                during = percentile(live.pooled("during", kind), fraction)
                cells[kind, fraction] = f"{milliseconds(during)} (×{during / percentile(idle[kind], fraction):.2f})"
        purges = [one.purge for one in live.rounds]
        longest = max(seconds for run in purges for seconds in run.batch_seconds)
        lines.append(
            f"| {live.label} | {cells['read', 0.5]} | {cells['read', 0.99]} "
            f"| {', '.join(f'{one.read_p99_ratio:.2f}' for one in live.rounds)} "
            f"(median {live.median_read_p99_ratio:.2f}) | {cells['upsert', 0.5]} | {cells['upsert', 0.99]} "
            f"| {milliseconds(longest)} | {statistics.median(run.seconds for run in purges):.1f} s, "
            f"{statistics.median(run.rows_per_second for run in purges):,.0f} rows/s |"
        )
    return lines


def memory_table(results: Results) -> list[str]:
    lines = ["| backlog (overdue property objects) | cards deleted | peak RSS |", "|---|---|---|"]
    for backlog, peak_kib, deleted in results.rss:
        lines.append(f"| {backlog:,} | {deleted:,} | {peak_kib / 1024:.1f} MB |")
    return lines


def render_report(
    results: Results, targets: list[Target], *, args, chart_name: str, elapsed: float, written, host: dict[str, str],
) -> str:
    """The report: `written` is when (a UTC datetime), `host` describes the machine (cores, python, server)."""
    sizes, backlogs = results.sizes, results.backlogs
    samples = "; ".join(f"{len(live.pooled('during', 'read')):,} during {live.label}" for live in results.live)
    tables = {
        "targets_table": targets_table(targets),
        "throughput_table": throughput_table(results),
        "scaling_table": scaling_table(results),
        "live_table": live_table(results),
        "memory_table": memory_table(results),
    }
    return Template(TEMPLATE.read_text()).substitute(
        {name: "\n".join(lines) for name, lines in tables.items()},
        written=f"{written:%Y-%m-%d %H:%M}",
        elapsed_minutes=f"{elapsed / 60:.1f}",
        **host,
        batch_size=args.batch_size,
        chart=chart_name,
        repeats=args.repeats,
        throughput_cards=f"{sizes['backlog_large']:,}",
        throughput_backlog=f"{backlogs['backlog_large']:,}",
        small_cards=f"{sizes['small']:,}",
        small_backlog=f"{backlogs['small']:,}",
        large_base_cards=f"{sizes['large'] - sizes['small']:,}",
        large_cards=f"{sizes['large']:,}",
        large_backlog=f"{backlogs['large']:,}",
        spread_cards=f"{sizes['spread']:,}",
        spread_backlog=f"{backlogs['spread']:,}",
        spread_factor=f"{sizes['spread'] / sizes['small']:.0f}",
        live_cards=f"{sizes['backlog_large']:,}",
        live_backlog=f"{backlogs['backlog_large']:,}",
        reads_per_second=args.reads_per_second,
        upserts_per_second=args.upserts_per_second,
        idle_seconds=f"{args.idle_seconds:g}",
        live_rounds=args.live_rounds,
        live_samples=f"{len(results.idle['read']):,} idle; {samples}",
        uncapped_batches=UNCAPPED_BATCHES,
        memory_cards=f"{sizes['backlog_large']:,}",
    )


def draw_chart(path: Path, results: Results) -> None:
    import matplotlib  # only the report needs it: requirements-bench.txt

    matplotlib.use("Agg")
    from matplotlib import pyplot
    from matplotlib.ticker import LogLocator, MaxNLocator, NullFormatter, ScalarFormatter

    figure, (left, right) = pyplot.subplots(1, 2, figsize=(14, 6.5))
    for axes in (left, right):
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    for (template, with_index), runs in results.scaling.items():
        left.plot(
            [s * 1000 for s in runs[0].batch_seconds], marker="o", markersize=3,
            linestyle="-" if with_index else "--",
            label=f"{SCALING_LABELS[template]}, {results.sizes[template]:,} cards"
                  f"{'' if with_index else ', no partial index'}",
        )
    left.set_yscale("log")
    left.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    left.yaxis.set_major_formatter(ScalarFormatter())
    left.yaxis.set_minor_formatter(NullFormatter())
    left.set_title(f"Backlog of {results.backlogs['small']:,}: small vs large table")
    left.set_xlabel("batch")
    left.set_ylabel("batch latency, ms (log scale)")
    backlog_runs = [
        (results.jobs[0].batch_seconds, "job"), (results.floors[0].batch_seconds, "raw-SQL floor"),
        *((live.rounds[0].purge.batch_seconds, f"{live.label}, under live traffic") for live in results.live),
    ]
    for batch_seconds, label in backlog_runs:
        right.plot([s * 1000 for s in batch_seconds], linewidth=1, label=label)
    right.set_title(f"Backlog of {results.backlogs['backlog_large']:,} in {results.sizes['backlog_large']:,} cards")
    right.set_xlabel("batch")
    right.set_ylabel("batch latency, ms")
    right.set_ylim(bottom=0)
    for axes in (left, right):
        axes.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize="small", frameon=False)
    figure.tight_layout()
    figure.savefig(path, dpi=100)

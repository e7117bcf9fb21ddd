"""The report (`docs/benchmarks.md`) and its chart: the targets judged, the tables, and the prose of
`report_template.md` with the run's figures filled in. The hand-written findings live in
`docs/benchmark-findings.md`, which no run rewrites."""

import statistics
from dataclasses import dataclass
from pathlib import Path
from string import Template

from bench.measure import (
    PAUSED_BATCHES, UNCAPPED_BATCHES, LiveTraffic, Pairs, Results, Run, TracingCost, percentile, pooled_idle,
)
from bench.workers import RETENTION_PAGE

TEMPLATE = Path(__file__).with_name("report_template.md")
TARGETS = {
    # job rows/s ÷ the base commit's job's, median of the pairs, at the large catalog and under live traffic, at least
    "base": 0.95,
    "small_throughput": 1.0,  # job rows/s ÷ floor rows/s at the small throughput catalog, at least
    "peers_floor": 1.2,  # the same under live traffic at the peers catalog, at least
    "longest_transaction": 0.1,  # seconds, the job's longest transaction there (every round), at most
    "base_batch": 1.05,  # batch p50 of this job ÷ the base commit's job's, median of the pairs, at most
    "live_read": 1.2,  # live-read p99 during the purge ÷ idle, at most
    "rss_growth_mb": 20.0,  # peak RSS of the long run − of the short one, at most
    "admin_page": 8.0,  # an admin page's median time ÷ the admin index page's, at most
    "retention_page": 6.0,  # the Delisted retention page's ÷ the admin index page's, at most
    "tracing": 0.97,  # job rows/s with tracing on (exporting) ÷ off, at least
}
# Former targets that one host's noise decided, restated as paired ratios against the base (TARGETS["base"]); their
# figures are still reported, for information, beside their former goals.
FORMER_TARGETS = {
    "throughput": 1.18,  # job rows/s ÷ floor rows/s at the large catalog
    "peers_sentry": 1.0,  # job rows/s ÷ the autocommit DELETE ... LIMIT loop's under live traffic
    "scaling": 1.2,  # batch p50 at the large table ÷ at the small one
}
SCALING_LABELS = {
    "small": "small demo catalog",
    "large": "same backlog, table grown",
    "backlog_large": "large backlog, spread thin",
}
THROUGHPUT_LABELS = {"backlog_large": "large catalog", "backlog_small": "small throughput catalog"}


@dataclass(frozen=True)
class Target:
    name: str
    measured: str
    goal: str
    passed: bool | None  # None: reported for information, judged against no goal

    @property
    def failed(self) -> bool:
        return self.passed is False


def information(name: str, measured: str, former_goal: str) -> Target:
    return Target(name, measured, f"information (was {former_goal})", None)


def table_head(*columns: str) -> list[str]:
    return ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def batch_percentiles(runs: list[Run]) -> tuple[float, float]:
    batches = [seconds for run in runs for seconds in run.batch_seconds]
    return percentile(batches, 0.5), percentile(batches, 0.99)


def throughput_ratio(results: Results, template: str) -> tuple[str, str, float]:
    """Job ÷ floor at a catalog of section 1: the target's name, its figures, the ratio of the medians."""
    throughput = results.throughput[template]
    job_rate, floor_rate = median_rate(throughput.jobs), median_rate(throughput.floors)
    return (
        f"job throughput ÷ raw-SQL floor, {results.sizes[template]:,} cards, {results.backlogs[template]:,} overdue",
        f"**{job_rate / floor_rate:.2f}** ({job_rate:,.0f} vs {floor_rate:,.0f} rows/s)",
        job_rate / floor_rate,
    )


def pair_ratios(this: list[Run], base: list[Run]) -> list[float]:
    """Each pair's rows/s, this job ÷ the base's."""
    return [one.rows_per_second / other.rows_per_second for one, other in zip(this, base)]


def median_of_pairs(ratios: list[float]) -> tuple[float, str]:
    """The median of the pairs' ratios, and as measured: with their range and each, for how far the host moved a
    pair."""
    median, each = statistics.median(ratios), ", ".join(f"{ratio:.2f}" for ratio in ratios)
    return median, f"**{median:.2f}** ({min(ratios):.2f}–{max(ratios):.2f}; pairs: {each})"


def paired_target(name: str, this: list[Run], base: list[Run]) -> Target:
    """This job against the base's in pairs run minutes apart at most."""
    median, measured = median_of_pairs(pair_ratios(this, base))
    return Target(name, measured, f"≥ {TARGETS['base']}", median >= TARGETS["base"])


def paired_batch_target(name: str, this: list[Run], base: list[Run]) -> Target:
    """A batch's p50 in this job against the base's, pair by pair: how the job's batches fare at the large table
    against a code that met the scaling target, in the same minutes."""
    ratios = [batch_percentiles([one])[0] / batch_percentiles([other])[0] for one, other in zip(this, base)]
    median, measured = median_of_pairs(ratios)
    return Target(name, measured, f"≤ {TARGETS['base_batch']}", median <= TARGETS["base_batch"])


def pairs_table(pairs: Pairs) -> list[str]:
    lines = table_head("pair", "order", "this code", f"base {pairs.commit}", "this ÷ base")
    for number, (this, base, ratio) in enumerate(
        zip(pairs.this, pairs.base, pair_ratios(pairs.this, pairs.base)), start=1,
    ):
        order = "this, then base" if number % 2 else "base, then this"
        lines.append(
            f"| {number} | {order} | {this.rows_per_second:,.0f} rows/s ({this.seconds:.2f} s) "
            f"| {base.rows_per_second:,.0f} rows/s ({base.seconds:.2f} s) | {ratio:.3f} |"
        )
    return lines


def tracing_target(tracing: TracingCost, cards: int, overdue: int) -> Target:
    """The medians compared, as in section 1; each round's own ratio shown, for how far the neighbours' load moves
    a run on shared cores."""
    on_rate, off_rate = median_rate(tracing.on), median_rate(tracing.off)
    rounds = ", ".join(f"{on.rows_per_second / off.rows_per_second:.2f}" for off, on in zip(tracing.off, tracing.on))
    return Target(
        f"job throughput, tracing on (exporting) ÷ off, {cards:,} cards, {overdue:,} overdue",
        f"**{on_rate / off_rate:.3f}** ({on_rate:,.0f} vs {off_rate:,.0f} rows/s; rounds: {rounds})",
        f"≥ {TARGETS['tracing']}", on_rate / off_rate >= TARGETS["tracing"],
    )


def tracing_table(tracing: TracingCost) -> list[str]:
    lines = table_head("run", "cards deleted", "seconds", "rows/s", "job CPU seconds", "batch p50", "batch p99")
    for run in [run for pair in zip(tracing.off, tracing.on) for run in pair]:
        p50, p99 = batch_percentiles([run])
        lines.append(
            f"| {run.label} | {run.deleted_cards:,} | {run.seconds:.2f} | {run.rows_per_second:,.0f} "
            f"| {run.cpu_seconds:.2f} | {milliseconds(p50)} | {milliseconds(p99)} |"
        )
    return lines


def tracing_cpu(tracing: TracingCost) -> str:
    """What tracing adds to the job's own CPU, the part of its cost that the neighbours' load hardly moves, and the
    throughput that would be left if all of it lay on the run's critical path."""
    extra = statistics.median(on.cpu_seconds for on in tracing.on) - statistics.median(
        off.cpu_seconds for off in tracing.off)
    wall = statistics.median(off.seconds for off in tracing.off)
    return (f"Tracing adds {extra:+.2f} s of the job's CPU to a run (medians); were all of it on the run's path, "
            f"the throughput would be at least {wall / (wall + max(extra, 0.0)):.3f} of tracing off.")


def peer_targets(results: Results) -> list[Target]:
    """Section 6: the job against the floor, the base's job (each round's pair) and the Sentry shape under live
    traffic, and its longest transaction."""
    job = purge_runs(results.peers["job"])
    job_rate = median_rate(job)
    under_traffic = f"{results.sizes['peers']:,} cards, {results.backlogs['peers']:,} overdue, under live traffic"

    def against(peer: str) -> tuple[str, str, float]:
        peer_rate = median_rate(purge_runs(results.peers[peer]))
        return (
            f"job throughput ÷ {results.peers[peer].label}, {under_traffic}",
            f"**{job_rate / peer_rate:.2f}** ({job_rate:,.0f} vs {peer_rate:,.0f} rows/s, medians of rounds)",
            job_rate / peer_rate,
        )

    floor_name, floor_measured, floor_ratio = against("floor")
    sentry_name, sentry_measured, _ = against("sentry")
    targets = [
        Target(floor_name, floor_measured, f"≥ {TARGETS['peers_floor']}", floor_ratio >= TARGETS["peers_floor"]),
        paired_target(
            f"job throughput ÷ {results.peers['base'].label}, {under_traffic}, median of the rounds' pairs", job,
            purge_runs(results.peers["base"]),
        ),
        information(sentry_name, sentry_measured, f"≥ {FORMER_TARGETS['peers_sentry']}"),
    ]
    longest = longest_transaction(job)
    rounds = ", ".join(milliseconds(run.longest_transaction) for run in job)
    targets.append(Target(
        f"the job's longest transaction (counts, orphan sweep, batches), {under_traffic}",
        f"**{milliseconds(longest)}** (rounds: {rounds})",
        f"≤ {milliseconds(TARGETS['longest_transaction'])}", longest <= TARGETS["longest_transaction"],
    ))
    return targets


def evaluate_targets(results: Results) -> list[Target]:
    small_p50, _ = batch_percentiles(results.scaling["small", True])
    large_p50, _ = batch_percentiles(results.scaling["large", True])
    target_live = next((live for live in results.live if live.adaptive), results.live[0])
    read_ratio = target_live.median_read_p99_ratio
    round_ratios = ", ".join(f"{one.read_p99_ratio:.2f}" for one in target_live.rounds)
    (_, small_rss, small_deleted), (_, large_rss, large_deleted) = results.rss
    growth_mb = (large_rss - small_rss) / 1024
    sizes = results.sizes
    index, *pages = results.admin_pages
    slowest = max(pages, key=lambda page: page.median)
    retention_page = next(page for page in pages if page.label == RETENTION_PAGE)
    large_name, large_measured, _ = throughput_ratio(results, "backlog_large")
    small_name, small_measured, small_ratio = throughput_ratio(results, "backlog_small")
    pairs = results.pairs
    return [
        paired_target(
            f"job throughput ÷ the job at {pairs.commit} (base), {sizes['backlog_large']:,} cards, "
            f"{results.backlogs['backlog_large']:,} overdue, median of {len(pairs.this)} pairs",
            pairs.this, pairs.base,
        ),
        information(large_name, large_measured, f"≥ {FORMER_TARGETS['throughput']}"),
        Target(small_name, small_measured, f"≥ {TARGETS['small_throughput']}",
               small_ratio >= TARGETS["small_throughput"]),
        *peer_targets(results),
        paired_batch_target(
            f"batch p50 of the job ÷ of the job at {pairs.commit} (base), {sizes['backlog_large']:,} cards, median of "
            f"{len(pairs.this)} pairs", pairs.this, pairs.base,
        ),
        information(
            f"batch p50 at {sizes['large']:,} ÷ at {sizes['small']:,} cards",
            f"**{large_p50 / small_p50:.2f}** ({milliseconds(large_p50)} vs {milliseconds(small_p50)})",
            f"≤ {FORMER_TARGETS['scaling']}",
        ),
        Target(
            f"live-read p99 during the purge ({target_live.label}) ÷ idle, median of rounds",
            f"**{read_ratio:.2f}** (rounds: {round_ratios})",
            f"≤ {TARGETS['live_read']}", read_ratio <= TARGETS["live_read"],
        ),
        Target(
            f"peak RSS growth, {small_deleted:,} → {large_deleted:,} cards deleted",
            f"**{growth_mb:+.1f} MB** ({small_rss / 1024:.1f} → {large_rss / 1024:.1f} MB)",
            f"≤ {TARGETS['rss_growth_mb']:.0f} MB", growth_mb <= TARGETS["rss_growth_mb"],
        ),
        Target(
            f"slowest admin page ÷ admin index, {sizes['admin']:,} cards, {results.backlogs['admin']:,} overdue",
            f"**{slowest.median / index.median:.1f}** ({slowest.label}: {milliseconds(slowest.median)} vs "
            f"{milliseconds(index.median)})",
            f"≤ {TARGETS['admin_page']:.0f} each", slowest.median / index.median <= TARGETS["admin_page"],
        ),
        Target(
            f"Delisted retention page ÷ admin index, {sizes['admin']:,} cards",
            f"**{retention_page.median / index.median:.1f}** ({milliseconds(retention_page.median)})",
            f"≤ {TARGETS['retention_page']:.0f}", retention_page.median / index.median <= TARGETS["retention_page"],
        ),
        tracing_target(results.tracing, sizes["backlog_large"], results.backlogs["backlog_large"]),
    ]


def targets_table(targets: list[Target]) -> list[str]:
    lines = table_head("target", "measured", "goal", "result")
    for target in targets:
        result = "information" if target.passed is None else "**pass**" if target.passed else "**FAIL**"
        lines.append(f"| {target.name} | {target.measured} | {target.goal} | {result} |")
    return lines


def throughput_table(results: Results) -> list[str]:
    lines = table_head(
        "catalog", "run", "cards deleted", "seconds", "rows/s", "batch p50", "batch p99", "longest transaction",
    )
    for template, throughput in results.throughput.items():
        for run in [*throughput.jobs, *throughput.floors]:
            p50, p99 = batch_percentiles([run])
            lines.append(
                f"| {THROUGHPUT_LABELS[template]}, {results.sizes[template]:,} cards | {run.label} "
                f"| {run.deleted_cards:,} | {run.seconds:.2f} | {run.rows_per_second:,.0f} "
                f"| {milliseconds(p50)} | {milliseconds(p99)} | {milliseconds(run.longest_transaction)} |"
            )
    return lines


def scaling_table(results: Results) -> list[str]:
    sizes, backlogs = results.sizes, results.backlogs
    lines = table_head(
        "catalog", "property-object cards", "overdue", "partial indexes", "batches", "batch p50", "batch p99",
        "rows/s (median run)",
    )
    for (template, with_index), runs in results.scaling.items():
        p50, p99 = batch_percentiles(runs)
        lines.append(
            f"| {SCALING_LABELS[template]} | {sizes[template]:,} | {backlogs[template]:,} "
            f"| {'yes' if with_index else 'dropped'} | {sum(len(run.batch_seconds) for run in runs)} "
            f"| {milliseconds(p50)} | {milliseconds(p99)} "
            f"| {median_rate(runs):,.0f} |"
        )
    return lines


def live_cells(live: LiveTraffic, idle: dict[str, list[float]], kind: str, fraction: float) -> str:
    """A percentile of the samples during the purge, and its ratio to idle."""
    during = percentile(live.pooled("during", kind), fraction)
    return f"{milliseconds(during)} (×{during / percentile(idle[kind], fraction):.2f})"


def purge_runs(live: LiveTraffic) -> list[Run]:
    return [one.purge for one in live.rounds]


def median_seconds(runs: list[Run]) -> float:
    return statistics.median(run.seconds for run in runs)


def median_rate(runs: list[Run]) -> float:
    return statistics.median(run.rows_per_second for run in runs)


def longest_transaction(runs: list[Run]) -> float:
    return max(run.longest_transaction for run in runs)


def live_table(results: Results) -> list[str]:
    idle = pooled_idle(results.live)
    lines = table_head(
        "purge", "read p50", "read p99", "read p99 ÷ idle, per round", "upsert p50", "upsert p99",
        "longest transaction (≥ longest row-lock hold)", "purge run (median)",
    )
    idle_cells = [
        milliseconds(percentile(idle[kind], fraction)) for kind in ("read", "upsert") for fraction in (0.5, 0.99)
    ]
    lines.append(f"| idle (no purge) | {idle_cells[0]} | {idle_cells[1]} | | {idle_cells[2]} | {idle_cells[3]} | | |")
    for live in results.live:
        purges = purge_runs(live)
        lines.append(
            f"| {live.label} | {live_cells(live, idle, 'read', 0.5)} | {live_cells(live, idle, 'read', 0.99)} "
            f"| {', '.join(f'{one.read_p99_ratio:.2f}' for one in live.rounds)} "
            f"(median {live.median_read_p99_ratio:.2f}) "
            f"| {live_cells(live, idle, 'upsert', 0.5)} | {live_cells(live, idle, 'upsert', 0.99)} "
            f"| {milliseconds(longest_transaction(purges))} | {median_seconds(purges):.1f} s, "
            f"{median_rate(purges):,.0f} rows/s |"
        )
    for label, why in results.unmeasured:
        lines.append(f"| {label} | not measured: {why} | | | | | | |")
    return lines


def pause_factor_effect(results: Results) -> str:
    """One sentence: what the adaptive pause did to the live traffic, next to the job without any pause."""
    factors = [live for live in results.live if live.adaptive]
    if not factors:
        return f"The adaptive pause was not measured: {results.unmeasured[0][1]}."
    unpaused = results.live[0]
    effects = [
        f"*{live.label}*: read p99 ÷ idle {live.median_read_p99_ratio:.2f} (median of rounds) against "
        f"{unpaused.median_read_p99_ratio:.2f} for *{unpaused.label}*, upsert p99 "
        f"{milliseconds(percentile(live.pooled('during', 'upsert'), 0.99))} against "
        f"{milliseconds(percentile(unpaused.pooled('during', 'upsert'), 0.99))}, the run "
        f"{median_seconds(purge_runs(live)):.1f} s against {median_seconds(purge_runs(unpaused)):.1f} s"
        for live in factors
    ]
    return "The adaptive pause: " + "; ".join(effects) + "."


def peers_table(results: Results) -> list[str]:
    idle = pooled_idle(list(results.peers.values()))
    job_rate = median_rate(purge_runs(results.peers["job"]))
    lines = table_head(
        "purge", "rows/s (median; rounds)", "÷ job", "longest transaction (rounds)", "read p99", "upsert p99",
        "longest restore wait (restores during the purge)",
    )
    for live in results.peers.values():
        purges = purge_runs(live)
        restores = live.pooled("during", "restore")
        longest_restore = f"{milliseconds(max(restores))} ({len(restores):,})" if restores else "(none)"
        rounds = ", ".join(f"{run.rows_per_second:,.0f}" for run in purges)
        lines.append(
            f"| {live.label} | {median_rate(purges):,.0f} ({rounds}) | {median_rate(purges) / job_rate:.2f} "
            f"| {milliseconds(longest_transaction(purges))} "
            f"({', '.join(milliseconds(run.longest_transaction) for run in purges)}) "
            f"| {live_cells(live, idle, 'read', 0.99)} | {live_cells(live, idle, 'upsert', 0.99)} | {longest_restore} |"
        )
    return lines


def one_shot_table(results: Results) -> list[str]:
    """The study's runs against its first (the floor as section 1 runs it)."""
    reference = results.one_shot_study[0]
    lines = table_head("statement shape", "statements", "seconds", "rows/s", "÷ batch 2,000", "longest statement")
    for run in results.one_shot_study:
        lines.append(
            f"| {run.label} | {len(run.batch_seconds):,} | {run.seconds:.2f} | {run.rows_per_second:,.0f} "
            f"| {run.rows_per_second / reference.rows_per_second:.2f} | {milliseconds(run.longest_transaction)} |"
        )
    return lines


def memory_table(results: Results) -> list[str]:
    lines = table_head("--max-batches", "cards deleted", "peak RSS")
    for max_batches, peak_kib, deleted in results.rss:
        lines.append(f"| {max_batches:,} | {deleted:,} | {peak_kib / 1024:.1f} MB |")
    return lines


def admin_table(results: Results) -> list[str]:
    index = results.admin_pages[0]
    lines = table_head("page", "path", "median", "÷ admin index", "result")
    for page in results.admin_pages:
        ratio = page.median / index.median
        goal = TARGETS["retention_page" if page.label == RETENTION_PAGE else "admin_page"]
        verdict = "" if page is index else "**pass**" if ratio <= goal else "**FAIL**"
        lines.append(f"| {page.label} | `{page.path}` | {milliseconds(page.median)} | {ratio:.1f} | {verdict} |")
    return lines


def render_report(
    results: Results, targets: list[Target], *, args, chart_name: str, elapsed: float, written, host: dict[str, str],
) -> str:
    """The report: `written` is when (a UTC datetime), `host` describes the machine (cores, python, server)."""
    sizes, backlogs = results.sizes, results.backlogs
    peers = list(results.peers.values())

    def samples(traffic: list[LiveTraffic]) -> str:
        return f"{len(pooled_idle(traffic)['read']):,} idle; " + "; ".join(
            f"{len(live.pooled('during', 'read')):,} during {live.label}" for live in traffic
        )

    tables = {
        "targets_table": targets_table(targets),
        "throughput_table": throughput_table(results),
        "pairs_table": pairs_table(results.pairs),
        "scaling_table": scaling_table(results),
        "live_table": live_table(results),
        "peers_table": peers_table(results),
        "one_shot_table": one_shot_table(results),
        "memory_table": memory_table(results),
        "admin_table": admin_table(results),
        "tracing_table": tracing_table(results.tracing),
    }
    idle_restores = pooled_idle(peers)["restore"]
    return Template(TEMPLATE.read_text()).substitute(
        {name: "\n".join(lines) for name, lines in tables.items()},
        written=f"{written:%Y-%m-%d %H:%M}",
        elapsed_minutes=f"{elapsed / 60:.1f}",
        **host,
        batch_size=args.batch_size,
        chart=chart_name,
        repeats=args.repeats,
        base_commit=results.pairs.commit,
        base_pairs=len(results.pairs.this),
        base_goal=TARGETS["base"],
        throughput_cards=f"{sizes['backlog_large']:,}",
        throughput_backlog=f"{backlogs['backlog_large']:,}",
        small_cards=f"{sizes['small']:,}",
        small_backlog=f"{backlogs['small']:,}",
        large_base_cards=f"{sizes['large'] - sizes['small']:,}",
        large_cards=f"{sizes['large']:,}",
        large_backlog=f"{backlogs['large']:,}",
        reads_per_second=args.reads_per_second,
        upserts_per_second=args.upserts_per_second,
        restores_per_second=f"{args.restores_per_second:g}",
        idle_seconds=f"{args.idle_seconds:g}",
        live_rounds=args.live_rounds,
        paused_batches=PAUSED_BATCHES,
        pause_factor_effect=pause_factor_effect(results),
        live_samples=samples(results.live),
        peer_samples=samples(peers),
        peer_rounds=args.peer_rounds,
        peer_cards=f"{sizes['peers']:,}",
        peer_backlog=f"{backlogs['peers']:,}",
        small_throughput_cards=f"{sizes['backlog_small']:,}",
        small_throughput_backlog=f"{backlogs['backlog_small']:,}",
        idle_restore_longest=milliseconds(max(idle_restores)) if idle_restores else "(none)",
        short_run_batches=f"{results.rss[0][0]:,}",
        uncapped_batches=f"{UNCAPPED_BATCHES}",
        admin_cards=f"{sizes['admin']:,}",
        admin_backlog=f"{backlogs['admin']:,}",
        admin_repeats=args.admin_repeats,
        tracing_rounds=args.tracing_rounds,
        tracing_spans=f"{results.tracing.spans:,}",
        tracing_cpu=tracing_cpu(results.tracing),
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
        if template == "backlog_large":  # the throughput runs: on the right
            continue
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
        (results.throughput["backlog_large"].jobs[0].batch_seconds, "job"),
        (results.throughput["backlog_large"].floors[0].batch_seconds, "raw-SQL floor"),
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

"""The benchmark's report (bench/report.py) from made-up results: every placeholder of the template filled, the
targets judged against their goals, and an option the job lacks reported as not measured rather than failing."""

from argparse import Namespace
from datetime import datetime, timezone

from bench.measure import AdminPage, LiveTraffic, Results, Run, TrafficRound
from bench.report import evaluate_targets, render_report

ARGS = Namespace(
    batch_size=2000, repeats=1, reads_per_second=400, upserts_per_second=40, restores_per_second=10,
    idle_seconds=4.0, live_rounds=1, peer_rounds=1, admin_repeats=3,
)
IDLE = {"read": [0.001, 0.002], "upsert": [0.002, 0.003], "restore": [0.002]}


def run(label: str, seconds: float, batch_ms: float = 30.0) -> Run:
    return Run(label=label, deleted_cards=200_000, seconds=seconds, batch_seconds=[batch_ms / 1000] * 100)


def live(label: str, *, read_p99: float, adaptive: bool = False) -> LiveTraffic:
    during = {"read": [0.001, read_p99], "upsert": [0.002, 0.004], "restore": [0.003, 0.03]}
    return LiveTraffic(label=label, rounds=[TrafficRound(run(label, 5.0), IDLE, during)], adaptive=adaptive)


def results(*, job_seconds: float, slowest_page: float, live_runs: list[LiveTraffic], unmeasured=()) -> Results:
    return Results(
        sizes={"small": 100_000, "large": 10_000_000, "backlog_large": 9_900_000, "admin": 1_000_000},
        backlogs={"small": 16_799, "large": 16_799, "backlog_large": 200_000, "admin": 200_000},
        jobs=[run("job", job_seconds)],
        floors=[run("floor", 5.0)],
        scaling={
            ("small", True): [run("small", 0.5, batch_ms=25)],
            ("large", True): [run("large", 0.5, batch_ms=28)],
            ("backlog_large", True): [run("job", job_seconds)],
            ("small", False): [run("small", 1.0, batch_ms=40)],
            ("large", False): [run("large", 9.0, batch_ms=900)],
        },
        live=live_runs,
        unmeasured=list(unmeasured),
        peers=[live("naive Django batches", read_p99=0.003)],
        rss=[(10, 57_000, 20_000), (1_000_000, 57_500, 202_000)],
        admin_pages=[
            AdminPage("admin index", "/admin/", [0.010]),
            AdminPage("Delisted retention backlog", "/admin/retention/delistedretention/", [slowest_page]),
        ],
    )


def render(measured: Results) -> str:
    return render_report(
        measured, evaluate_targets(measured), args=ARGS, chart_name="chart.png", elapsed=600,
        written=datetime(2026, 12, 3, tzinfo=timezone.utc), host={"cores": "2", "python": "CPython", "server": "PG"},
    )


def test_targets_pass_and_fail_by_their_goals():
    passing = results(job_seconds=4.0, slowest_page=0.070, live_runs=[live("job, pause 0 ms", read_p99=0.0022)])
    failing = results(job_seconds=6.0, slowest_page=0.090, live_runs=[live("job, pause 0 ms", read_p99=0.003)])

    assert [target.passed for target in evaluate_targets(passing)] == [True, True, True, True, True]
    # Slower than the floor, read p99 x1.5, an admin page at 9x the index; scaling and memory unchanged.
    assert [target.passed for target in evaluate_targets(failing)] == [False, True, False, True, False]


def test_the_report_fills_every_placeholder_and_says_what_the_pause_factor_did():
    report = render(results(job_seconds=4.0, slowest_page=0.070, live_runs=[
        live("job, pause 0 ms", read_p99=0.0022), live("job, pause factor 1", read_p99=0.002, adaptive=True),
        live("raw-SQL floor", read_p99=0.0024),
    ]))

    assert "$" not in report
    assert "| naive Django batches | 40,000 | 30.0 ms | 3.0 ms (×1.50) | 4.0 ms (×1.33) | 30.0 ms (2) |" in report
    assert "*job, pause factor 1*: read p99 ÷ idle 1.00 (median of rounds) against 1.10" in report


def test_a_pause_factor_the_job_lacks_is_reported_as_not_measured():
    why = "`purge_delisted --help` lists no `--batch-pause-factor`"
    measured = results(
        job_seconds=4.0, slowest_page=0.070,
        live_runs=[live("job, pause 0 ms", read_p99=0.0022), live("raw-SQL floor", read_p99=0.0024)],
        unmeasured=[("job, pause factor 1", why)],
    )

    report = render(measured)

    assert f"| job, pause factor 1 | not measured: {why} |" in report
    assert f"The adaptive pause was not measured: {why}." in report
    assert all(target.passed for target in evaluate_targets(measured))

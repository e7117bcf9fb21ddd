"""The backlog chart of the Delisted retention page: the cards becoming deletable on each of the next days, counted
to the microsecond at the day and cutoff boundaries, and the picture drawn from exactly those numbers."""

import re
from datetime import date, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.urls import reverse

from catalog.models import CardStatus
from catalog.admin.retention_chart import (
    CHART_DAYS,
    PLOT_HEIGHT,
    BacklogChart,
    DeletableOn,
    count_becoming_deletable,
    nice_ceiling,
)
from catalog.statements import STATEMENTS
from retention.backlog import Backlog, KindBacklog
from retention.session import Session
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 1, 3, 30, tzinfo=timezone.utc)
RETENTION = timedelta(days=30)
CUTOFF = NOW - RETENTION
MICROSECOND = timedelta(microseconds=1)
PAGE = reverse("admin:catalog_delistedretention_changelist")


def delisted_object(deletable_at: datetime, **fields):
    return PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=deletable_at - RETENTION, **fields)


def delisted_project(deletable_at: datetime):
    return ProjectCardFactory(status=CardStatus.DELISTED, updated_at=deletable_at - RETENTION)


def counted(days: list[DeletableOn]) -> dict[date, tuple[int, int]]:
    return {day.day: (day.property_objects, day.projects) for day in days if day.cards}


def test_each_card_counts_on_the_day_its_retention_period_ends_from_the_cutoff_on():
    delisted_object(NOW - MICROSECOND)  # overdue already: the overdue bar, not a day's
    delisted_object(NOW)  # the cutoff itself is not overdue: today
    delisted_object(datetime(2026, 6, 1, 23, 59, 59, 999999, tzinfo=timezone.utc))
    delisted_object(datetime(2026, 6, 2, tzinfo=timezone.utc))
    delisted_project(datetime(2026, 6, 30, 23, tzinfo=timezone.utc))  # the 30th day
    delisted_project(datetime(2026, 7, 1, tzinfo=timezone.utc))  # the 31st: past the chart
    PropertyObjectCardFactory(status=CardStatus.HIDDEN, updated_at=NOW - timedelta(days=3))

    counts = count_becoming_deletable(Session(), cutoff=CUTOFF, retention=RETENTION, days=CHART_DAYS, time_zone="UTC")

    assert [day.day for day in counts.days] == [date(2026, 6, 1) + timedelta(days=n) for n in range(CHART_DAYS)]
    assert counted(counts.days) == {date(2026, 6, 1): (2, 0), date(2026, 6, 2): (1, 0), date(2026, 6, 30): (0, 1)}
    assert counts.later == DeletableOn(None, 0, 1)
    # Every card within the retention window, for the page's backlog, which does not count them again.
    within_window = counts.within_window(CUTOFF)
    assert (within_window.property_objects.within_window, within_window.projects.within_window) == (3, 2)
    assert (within_window.property_objects.overdue, within_window.projects.overdue) == (0, 0)


def test_the_days_follow_the_retention_period():
    retention = timedelta(days=45)
    PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=NOW - timedelta(days=40))

    counts = count_becoming_deletable(
        Session(), cutoff=NOW - retention, retention=retention, days=CHART_DAYS, time_zone="UTC"
    )

    assert counted(counts.days) == {date(2026, 6, 6): (1, 0)}


def test_the_days_are_the_catalogs_time_zones():
    delisted_object(datetime(2026, 6, 1, 20, 59, 59, tzinfo=timezone.utc))  # 23:59:59 in Moscow (UTC+3)
    delisted_object(datetime(2026, 6, 1, 21, tzinfo=timezone.utc))  # midnight there: the next day

    in_moscow = count_becoming_deletable(
        Session(), cutoff=CUTOFF, retention=RETENTION, days=CHART_DAYS, time_zone="Europe/Moscow"
    ).days
    in_utc = count_becoming_deletable(
        Session(), cutoff=CUTOFF, retention=RETENTION, days=CHART_DAYS, time_zone="UTC"
    ).days

    assert counted(in_moscow) == {date(2026, 6, 1): (1, 0), date(2026, 6, 2): (1, 0)}
    assert counted(in_utc) == {date(2026, 6, 1): (2, 0)}


def test_the_count_reads_only_the_partial_indexes_of_delisted_cards():
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the test tables are tiny: ask for the index plan
        cursor.execute(
            f"EXPLAIN {STATEMENTS['becoming deletable']}",
            {"cutoff": CUTOFF, "retention": RETENTION, "days": CHART_DAYS, "time_zone": "UTC"},
        )
        plan = "\n".join(row[0] for row in cursor.fetchall())

    # Through the partial indexes, never the tables' whole: whether the scan is index-only or visits the heap too is
    # the planner's reading of the statistics and the visibility map, which the worker's other tests leave as they do.
    assert "Seq Scan" not in plan, plan
    for index in ("property_object_cards_delisted_updated_at_idx", "project_cards_delisted_updated_at_idx"):
        assert re.search(rf"(Index (Only )?Scan using|Bitmap Index Scan on) {index}\b", plan), plan


def backlog(objects_overdue: int, projects_overdue: int) -> Backlog:
    return Backlog(
        cutoff=CUTOFF,
        property_objects=KindBacklog(delisted=objects_overdue, overdue=objects_overdue, oldest_delisted_at=None),
        projects=KindBacklog(delisted=projects_overdue, overdue=projects_overdue, oldest_delisted_at=None),
    )


def arrivals(*cards: tuple[int, int]) -> list[DeletableOn]:
    return [DeletableOn(date(2026, 6, 1) + timedelta(days=n), *pair) for n, pair in enumerate(cards)]


def test_bar_heights_are_the_counts_on_each_panel_scale():
    chart = BacklogChart(
        backlog=backlog(1500, 300), deletable_on=arrivals((40, 0), (0, 0), (150, 50)), cards_per_night=1000,
        last_run_overdue=(900, 100),
    )

    assert chart.overdue.scale_max == 2000 and chart.days.scale_max == 200
    now, after_last_run = chart.overdue_now, chart.after_last_run
    assert (now.property_objects, now.projects, after_last_run.cards) == (1500, 300, 1000)
    assert (chart.overdue.height(now.property_objects), chart.overdue.height(now.projects)) == (
        PLOT_HEIGHT * 0.75, PLOT_HEIGHT * 0.15,
    )
    assert [chart.days.height(bar.property_objects) + chart.days.height(bar.projects) for bar in chart.arriving] == [
        PLOT_HEIGHT * 0.2, 0, PLOT_HEIGHT,
    ]
    assert chart.nights_needed == 2  # 1,800 overdue cards at 1,000 a night
    assert [line.label for line in chart.overdue.lines] == ["1 night"]  # the second night takes the rest
    assert chart.days.lines == []  # no day comes near a night's 1,000 cards
    assert (chart.busiest_day.key, chart.arriving_cards) == ("2026-06-03", 240)


def test_a_day_above_a_nights_capacity_shows_the_capacity_line():
    chart = BacklogChart(backlog=backlog(0, 0), deletable_on=arrivals((700, 0)), cards_per_night=500)

    assert [line.label for line in chart.days.lines] == ["one night's run"]
    assert chart.after_last_run is None and chart.overdue_now.cards == 0


@pytest.mark.parametrize(
    ("value", "ceiling"), [(0, 1), (1, 1), (7, 10), (10, 10), (11, 20), (3417, 5000), (200_000, 200_000)]
)
def test_scales_end_on_a_round_number(value, ceiling):
    assert nice_ceiling(value) == ceiling


def test_the_page_draws_the_chart_with_its_numbers_as_text(staff_client):
    PropertyObjectCardFactory(long_delisted=True)
    delisted_object(datetime.now(timezone.utc) + timedelta(days=3))

    response = staff_client.get(PAGE)

    html = response.content.decode()
    chart = response.context["chart"]
    assert chart.overdue_now.property_objects == 1 and chart.arriving_cards == 1
    assert '<svg xmlns="http://www.w3.org/2000/svg"' in html
    assert 'role="img"' in html and 'aria-labelledby="backlog-chart-title backlog-chart-desc"' in html
    third_day = chart.arriving[3].key
    assert f'<g class="bar" data-key="{third_day}" data-property-objects="1" data-projects="0">' in html
    assert "the job needs 1 night to clear them" in html
    assert f'<tr data-key="{third_day}"><th>Becoming deletable on {third_day}</th>' in html

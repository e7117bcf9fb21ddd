"""The Delisted retention page in a browser, on demo data: the counts, the limits, the preview and the chart read
what the database holds, counted here by statements of the test's own, in the words staff read, with moments in the
catalog's time zone (Moscow, the default) and a way to the overdue cards themselves."""

import re
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.urls import reverse

from catalog.demo_admin import DEMO_STAFF_USERNAME, create_staff_user
from catalog.demo_data import seed_demo_data
from catalog.admin.retention_chart import CHART_DAYS
from tests.support import purge

# The live server's requests see only committed data; the catalog is emptied after each test (tests/conftest.py).
pytestmark = pytest.mark.django_db(transaction=True)

PAGE = reverse("admin:catalog_delistedretention_changelist")
MOSCOW = ZoneInfo("Europe/Moscow")
# Small limits, so that the demo backlog takes more than one night and the chart draws its night lines.
BATCH_SIZE, MAX_BATCHES = 100, 2

DELISTED_COUNTS = """
SELECT count(*), count(*) FILTER (WHERE updated_at < now() - %(retention)s), min(updated_at)
  FROM catalog.{table} WHERE status = 'Delisted'
"""
PROJECTS_HELD_BACK = """
SELECT count(*) FROM catalog.project_cards AS project
 WHERE status = 'Delisted' AND updated_at < now() - %(retention)s
   AND EXISTS (SELECT FROM catalog.property_object_cards WHERE project_id = project.id)
"""
NEWEST_OVERDUE = """
SELECT id, updated_at FROM catalog.property_object_cards
 WHERE status = 'Delisted' AND updated_at < now() - %(retention)s ORDER BY updated_at DESC, id DESC LIMIT 1
"""
# Days in the catalog's time zone, Moscow by default.
DELETABLE_PER_DAY = """
SELECT ((updated_at + %(retention)s) AT TIME ZONE 'Europe/Moscow')::date, count(*)
  FROM catalog.{table} WHERE status = 'Delisted' AND updated_at >= now() - %(retention)s
 GROUP BY 1
"""


def number(text: str) -> int:
    return int(text.strip().replace(",", ""))


def database_counts(retention: timedelta) -> dict:
    with connection.cursor() as cursor:
        counts = {}
        for kind, table in (("property_objects", "property_object_cards"), ("projects", "project_cards")):
            cursor.execute(DELISTED_COUNTS.format(table=table), {"retention": retention})
            delisted, overdue, oldest = cursor.fetchone()
            cursor.execute(DELETABLE_PER_DAY.format(table=table), {"retention": retention})
            per_day = dict(cursor.fetchall())
            counts[kind] = {"delisted": delisted, "overdue": overdue, "oldest": oldest, "per_day": per_day}
        cursor.execute(PROJECTS_HELD_BACK, {"retention": retention})
        counts["held_back"] = cursor.fetchone()[0]
        cursor.execute("SELECT (now() AT TIME ZONE 'Europe/Moscow')::date")
        counts["today"] = cursor.fetchone()[0]
    return counts


def rows_by_heading(page, table: str) -> dict[str, str]:
    return {
        row.locator("th").inner_text().strip(): row.locator("td").inner_text().strip()
        for row in page.locator(f"{table} tbody tr").all()
    }


@pytest.fixture
def demo_night(settings, tmp_path):
    """Demo data at small limits after one night's run, which left the rest of the backlog (the metrics textfile)."""
    settings.DELISTED_RETENTION_BATCH_SIZE = BATCH_SIZE
    settings.DELISTED_RETENTION_MAX_BATCHES_PER_RUN = MAX_BATCHES
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = str(tmp_path / "catalog_delisted_retention.prom")
    seed_demo_data(projects=200, objects_per_project=20, reset=False, seed=20)
    return purge(batch_size=BATCH_SIZE, max_batches=MAX_BATCHES)


def test_staff_log_in_and_see_the_backlog_limits_and_preview_the_database_and_a_dry_run_give(
    admin_browser, demo_night, settings
):
    retention = timedelta(days=settings.DELISTED_RETENTION_PERIOD_DAYS)

    page = admin_browser.log_in(DEMO_STAFF_USERNAME, create_staff_user(), then=PAGE)

    assert page.url == admin_browser.url(PAGE)
    counts = database_counts(retention)
    for kind, row in (("property_objects", "#backlog-property-objects"), ("projects", "#backlog-projects")):
        cells = page.locator(f"{row} td")
        assert number(cells.nth(0).inner_text()) == counts[kind]["delisted"]
        assert number(cells.nth(1).inner_text()) == counts[kind]["overdue"]
        assert cells.nth(2).inner_text() == f"{counts[kind]['oldest'].astimezone(MOSCOW):%Y-%m-%d %H:%M} MSK"
    assert number(page.locator("#held-back .held-back").inner_text()) == counts["held_back"]
    summary = page.locator("#summary").inner_text()
    assert summary == (
        f"Every night a cleanup job deletes the cards that have been Delisted for more than "
        f"{settings.DELISTED_RETENTION_PERIOD_DAYS} days, with the display changes made to them. It deletes up to "
        f"{BATCH_SIZE * MAX_BATCHES} cards a night, {BATCH_SIZE} at a time, and stops after 20 minutes, "
        "whichever comes first."
    )

    # The settings' names are for operators, behind a section staff open when they need it.
    assert not page.locator("#limits").is_visible()
    page.click("#for-operators summary")
    limits = {
        row.locator("td").nth(0).inner_text(): row.locator("td").nth(1).inner_text().strip()
        for row in page.locator("#limits tbody tr").all()
    }
    assert limits["DELISTED_RETENTION_PERIOD_DAYS"] == f"{settings.DELISTED_RETENTION_PERIOD_DAYS} days"
    assert limits["DELISTED_RETENTION_BATCH_SIZE"] == str(BATCH_SIZE)
    assert limits["DELISTED_RETENTION_MAX_BATCHES_PER_RUN"] == str(MAX_BATCHES)

    dry_run = purge(dry_run=True, batch_size=BATCH_SIZE, max_batches=MAX_BATCHES)
    preview = rows_by_heading(page, "#preview")
    assert number(preview["Property object cards it deletes"]) == dry_run.deleted_property_object_cards
    assert number(preview["Project cards it deletes"]) == dry_run.deleted_project_cards
    assert number(preview[f"Steps of up to {BATCH_SIZE} cards"]) == dry_run.batches_processed
    assert preview["Cards left for later nights"] == ("yes" if dry_run.has_more else "no")
    assert dry_run.has_more  # the preview stops where the run would, at MaxBatchesPerRun

    last_run = rows_by_heading(page, "#last-run")
    assert last_run["Result"] == "Stopped at its nightly limit: the overdue cards left wait for the next night"
    assert last_run["Deleted"] == (
        f"{demo_night.deleted_property_object_cards:,} property objects, "
        f"{demo_night.deleted_project_cards:,} projects, {demo_night.deleted_overrides:,} display changes, "
        f"in {MAX_BATCHES} steps"
    )
    assert last_run["Took"] == "under a second"
    # A run of seconds ago, in Moscow time.
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d MSK \(just now\)", last_run["Ended"])


def test_staff_read_plain_words_and_every_table_says_what_it_holds(staff_browser, demo_night):
    page = staff_browser.open(PAGE)

    assert page.locator(".breadcrumbs").inner_text().split("\u203a") == ["Home ", " Delisted retention"]
    staff_text = page.locator("#content-main").inner_text()  # the operators' section is collapsed: not in it
    for jargon in (
        "MaxRunDuration", "MaxBatchesPerRun", "HELD BACK", "held back", "(never)", "DELISTED_RETENTION_", "has_more",
        "cutoff", "batch", "override", "(0 minutes", "UTC",
    ):
        assert jargon.lower() not in staff_text.lower()
    assert re.search(r"\d+ projects overdue still have property-object cards and wait", staff_text)
    tables = page.locator("#content-main table").all()
    assert tables and all(table.locator("caption").text_content().strip() for table in tables)


def chart_bars(page) -> dict[str, dict]:
    bars = {}
    for bar in page.locator("#backlog-chart svg g.bar").all():
        heights = [float(rect.get_attribute("height")) for rect in bar.locator("rect").all()]
        bars[bar.get_attribute("data-key")] = {
            "cards": (number(bar.get_attribute("data-property-objects")), number(bar.get_attribute("data-projects"))),
            "height": sum(heights),
            "title": bar.locator("title").text_content(),
        }
    return bars


def chart_table(page) -> dict[str, tuple[int, int]]:
    return {
        row.get_attribute("data-key"): (
            number(row.locator("td.property-objects").text_content()), number(row.locator("td.projects").text_content())
        )
        for row in page.locator("#backlog-chart-data tbody tr").all()
    }


def test_the_chart_draws_the_numbers_of_the_database_and_says_them_in_text(staff_browser, demo_night, settings):
    retention = timedelta(days=settings.DELISTED_RETENTION_PERIOD_DAYS)

    page = staff_browser.open(PAGE)

    counts = database_counts(retention)
    days = [counts["today"] + timedelta(days=n) for n in range(CHART_DAYS)]
    expected = {
        "now": (counts["property_objects"]["overdue"], counts["projects"]["overdue"]),
        "after-last-run": (counts["property_objects"]["overdue"], counts["projects"]["overdue"]),  # nothing since
        **{
            day.isoformat(): tuple(counts[kind]["per_day"].get(day, 0) for kind in ("property_objects", "projects"))
            for day in days
        },
    }
    assert sum(sum(cards) for key, cards in expected.items() if key not in ("now", "after-last-run")) > 0
    bars = chart_bars(page)
    assert {key: bar["cards"] for key, bar in bars.items()} == expected
    assert chart_table(page) == expected

    # Drawn to scale: within each panel a bar's height is its number of cards times the same factor.
    for panel in (("now", "after-last-run"), [day.isoformat() for day in days]):
        drawn = [(sum(bars[key]["cards"]), bars[key]["height"]) for key in panel]
        tallest_cards, tallest_height = max(drawn)
        assert all(height == pytest.approx(cards / tallest_cards * tallest_height, abs=0.02) for cards, height in drawn)
    overdue_now = sum(expected["now"])
    nights = -(-overdue_now // (BATCH_SIZE * MAX_BATCHES))
    assert nights == 3
    caption = page.locator("#backlog-chart figcaption").inner_text()
    assert f"Overdue now: {overdue_now:,} cards" in caption and "the job needs 3 nights to clear them" in caption
    assert page.locator("#backlog-chart desc").text_content().strip() == caption
    assert [label.text_content() for label in page.locator("#backlog-chart-overdue .limit-label").all()] == [
        "1 night", "2 nights",
    ]
    staff_browser.screenshot("delisted-retention-page.png")


def test_the_page_offers_no_form_and_no_control_to_change_anything(staff_browser, demo_night):
    page = staff_browser.open(PAGE)

    assert page.locator("#content-main form, #content-main input, #content-main button").count() == 0
    assert page.locator("a.addlink, a.changelink, a.deletelink").count() == 0



def test_staff_are_warned_past_the_goal_and_follow_the_link_to_the_overdue_cards(staff_browser, demo_night, settings):
    retention = timedelta(days=settings.DELISTED_RETENTION_PERIOD_DAYS)
    counts = database_counts(retention)
    oldest_past_due = (counts["today"] - counts["property_objects"]["oldest"].date()).days - retention.days
    assert oldest_past_due > 3  # the demo's oldest Delisted cards are months old

    page = staff_browser.open(PAGE)

    warning = page.locator("#overdue-warning")
    assert warning.is_visible()
    assert re.match(
        r"The oldest overdue property object has waited [\d,.]+ days past its deletion date, longer than the goal of "
        r"3 days", warning.inner_text(),
    )
    assert "past-goal" in page.locator("#backlog-property-objects .days-past-due").get_attribute("class")

    with page.expect_navigation():
        page.locator("#overdue-lists a", has_text="overdue property objects").click()
    staff_browser.loaded()
    assert "deletion=overdue" in page.url
    overdue = counts["property_objects"]["overdue"]
    assert page.locator("p.paginator").inner_text().splitlines()[-1] == f"{overdue:,} property object cards"
    assert {cell.inner_text() for cell in page.locator("#result_list td.field-status").all()} == {"Delisted"}

    # The list writes what the page writes: moments in Moscow time, prices with thousands separators; an id breaks
    # at most once.
    with connection.cursor() as cursor:
        cursor.execute(NEWEST_OVERDUE, {"retention": retention})
        newest_id, newest_at = cursor.fetchone()
    first_row = page.locator("#result_list tbody tr").first
    assert first_row.locator("th.field-id").inner_text() == str(newest_id)
    assert first_row.locator("td.field-updated").inner_text() == f"{newest_at.astimezone(MOSCOW):%Y-%m-%d %H:%M} MSK"
    prices = [cell.inner_text() for cell in page.locator("#result_list td.field-price_shown").all()]
    assert prices and all(re.fullmatch(r"\d{1,3}(,\d{3})*(\.\d\d)?", price) for price in prices), prices
    one_line = first_row.locator("td.field-status").bounding_box()["height"]  # its padding included
    assert first_row.locator("td.field-updated").bounding_box()["height"] <= one_line
    for column in ("th.field-id", "td.field-project_id"):
        assert first_row.locator(column).bounding_box()["height"] < 2 * one_line, column
    widths = page.locator("#changelist-form .results").evaluate("results => [results.scrollWidth, results.clientWidth]")
    assert widths[0] <= widths[1], "the list is wider than the page: its last columns scroll out of sight"
    staff_browser.screenshot("overdue-card-list.png")

"""The "Delisted retention" admin page: what waits for the nightly job, at which limits, what the next run would do,
and how the last one went. Staff only, read-only, and a fixed number of queries whatever the table sizes: the
backlog aggregates, one held-back count and the cards becoming deletable on each of the next days
(retention.backlog, catalog.admin.retention_chart), from which the preview of the next run is reckoned
(retention.preview.preview_run) rather than counted again and the chart drawn. The counts are kept a minute, and the
page says when they were made. The last run comes from the metrics sink the job writes. It lives with the catalog's
admin; the job (retention/) knows nothing of it. Its moments are in the catalog's time zone, written as the card
pages write them (catalog.admin.cards).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.contrib import admin
from django.core.cache import cache
from django.db import connection, transaction
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.timesince import timesince

from catalog.admin.cards import MOMENT_FORMAT, OverdueFilter, ReadOnlyAdmin, in_catalog_time_zone
from catalog.admin.retention_chart import CHART_DAYS, BacklogChart, DeletableOn, count_becoming_deletable
from catalog.models import DelistedRetention
from retention import metrics
from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.limits import LIMITS, PurgeLimits, PurgeLimitsError
from retention.preview import held_back_after, preview_run
from retention.results import Outcome
from retention.session import Session

# A page must not hang on a Pushgateway that accepts connections and never answers.
SINK_READ_TIMEOUT_SECONDS = 2
IN_ONE_PROCESS = "SELECT set_config('max_parallel_workers_per_gather', '0', true)"
# The counts are kept this long (Django's cache: each web process its own by default) and reused while no run has
# ended since; they are a page's main cost at 1M cards (docs/benchmark-findings.md).
COUNTS_MAX_AGE = timedelta(minutes=1)
COUNTS_CACHE_KEY = "catalog.admin.retention_page.counts"
# The retention goal (SLO): an overdue property object is deleted within this long past its deletion date. The alert
# DelistedRetentionOverdueTooOld fires past it too (deploy/prometheus, catalog_delisted_retention:overdue_age_slo_days;
# a test keeps the two equal). Past it the page warns.
OVERDUE_AGE_GOAL = timedelta(days=3)

OUTCOME_WORDING = {
    Outcome.COMPLETED: "Finished: every overdue card is gone",
    Outcome.HAS_MORE: "Stopped at its nightly limit: the overdue cards left wait for the next night",
    Outcome.STOPPED: "Stopped before it finished (shut down by the system or an operator)",
    Outcome.FAILED: "Failed: some cards could not be deleted; an operator should look at the job's log",
}


@dataclass(frozen=True)
class LastRun:
    """The last run that took the lock, as a metrics sink holds it. `overdue_left` is (property objects, projects),
    None when that run counted none of its own (a failure); `skipped_at` is a later start skipped because a run
    held the lock."""

    source: str
    outcome: Outcome
    wording: str
    ended_at: datetime
    duration_seconds: float
    batches: int
    deleted_property_object_cards: int
    deleted_project_cards: int
    deleted_overrides: int
    overdue_left: tuple[int, int] | None
    last_success_at: datetime | None
    skipped_at: datetime | None
    run_id: str | None
    trace_id: str | None

    @property
    def ended_ago(self) -> str:
        return how_long_ago(self.ended_at)

    @property
    def last_success_ago(self) -> str | None:
        return self.last_success_at and how_long_ago(self.last_success_at)

    @property
    def took(self) -> str:
        if self.duration_seconds < 1:
            return "under a second"
        if self.duration_seconds < 120:
            return f"{self.duration_seconds:.0f} seconds"
        return f"{self.duration_seconds / 60:.0f} minutes"


def how_long_ago(moment: datetime) -> str:
    """"just now" within the minute (timesince would say "0 minutes"), else "5 minutes ago", "2 days, 3 hours ago"."""
    if timezone.now() - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"


def last_run_of(reading: metrics.Reading, source: str) -> LastRun | None:
    ended = reading.value(metrics.LAST_RUN)
    outcome = next(
        (name for name in metrics.RUN_OUTCOMES if reading.value(metrics.LAST_RUN_OUTCOME, outcome=name) == 1), None
    )
    if ended is None or outcome is None:
        return None

    def count(name: str, **labels: str) -> int:
        return int(reading.value(name, **labels) or 0)

    success = reading.value(metrics.LAST_SUCCESS)
    skipped = reading.value(metrics.LAST_LOCK_BUSY) or 0
    info = reading.labels(metrics.LAST_RUN_INFO) or {}
    return LastRun(
        source=source,
        outcome=outcome,
        wording=OUTCOME_WORDING[outcome],
        ended_at=datetime.fromtimestamp(ended, UTC),
        duration_seconds=reading.value(metrics.LAST_RUN_DURATION) or 0.0,
        batches=count(metrics.LAST_RUN_BATCHES),
        deleted_property_object_cards=count(metrics.LAST_RUN_DELETED_CARDS, kind="property_object"),
        deleted_project_cards=count(metrics.LAST_RUN_DELETED_CARDS, kind="project"),
        deleted_overrides=count(metrics.LAST_RUN_DELETED_OVERRIDES),
        overdue_left=None if outcome == Outcome.FAILED else (
            count(metrics.BACKLOG, kind="property_object", scope="overdue"),
            count(metrics.BACKLOG, kind="project", scope="overdue"),
        ),
        last_success_at=None if success is None else datetime.fromtimestamp(success, UTC),
        skipped_at=datetime.fromtimestamp(skipped, UTC) if skipped > ended else None,
        run_id=info.get("run_id") or None,
        trace_id=info.get("trace_id") or None,
    )


def read_last_run() -> dict:
    """The last run from the first configured sink that recorded one, or why there is none to show."""
    sinks = metrics.configured_sinks()
    problems = []
    for sink in sinks:
        try:
            reading = sink.read(timeout=SINK_READ_TIMEOUT_SECONDS)
        except Exception as error:  # a missing gateway, an unreadable file: the page shows it and goes on
            problems.append(f"{sink}: {error}")
            continue
        if last_run := last_run_of(reading, str(sink)):
            return {"last_run": last_run}
    return {"sinks": [str(sink) for sink in sinks], "sink_problems": problems}


def settings_rows() -> list[tuple[str, str, object, str]]:
    """(description, setting, value as set, unit) of every limit, for the admin page's operators."""
    return [
        (limit.description, limit.setting, getattr(settings, limit.setting), limit.unit if limit.is_duration else "")
        for limit in LIMITS
    ]


class PageReads(Session):
    """The page's reads, all in the one transaction `open` begins, in the request's own process.

    A transaction each was two more round trips a read (BEGIN, COMMIT): 12 of the page's 22, which on busy cores
    cost as much as the counts themselves. The planner's parallel workers for the object count (250,000 index
    entries at 1M cards) doubled its time on 2 busy cores (34 against 17 ms), and a page load should not take cores
    from the job and the site (docs/benchmark-findings.md, "The admin page at 1M cards, again")."""

    def __init__(self, cursor):
        super().__init__()
        self.cursor = cursor

    @classmethod
    @contextmanager
    def open(cls) -> Iterator["PageReads"]:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(IN_ONE_PROCESS)
            yield cls(cursor)

    @contextmanager
    def transaction(self, *, writes: bool = False) -> Iterator:
        yield self.cursor


@dataclass(frozen=True)
class CatalogCounts:
    """What the page reads from the catalog, counted together at `counted_at`, at a retention period and in a time
    zone (the chart's days)."""

    counted_at: datetime
    retention: timedelta
    time_zone: str
    backlog: Backlog
    held_back_after_overdue_objects: int
    deletable_on: list[DeletableOn]


def count_catalog(*, retention: timedelta, time_zone: str) -> CatalogCounts:
    counted_at = timezone.now()
    with PageReads.open() as session:
        cutoff = compute_cutoff(session, retention)
        return CatalogCounts(
            counted_at=counted_at, retention=retention, time_zone=time_zone,
            backlog=measure_backlog(session, cutoff=cutoff),
            held_back_after_overdue_objects=held_back_after(session, cutoff=cutoff),
            deletable_on=count_becoming_deletable(
                session, cutoff=cutoff, retention=retention, days=CHART_DAYS, time_zone=time_zone,
            ),
        )


def recent_counts(*, retention: timedelta, time_zone: str, last_run: LastRun | None) -> CatalogCounts:
    """The counts of the last COUNTS_MAX_AGE, or new ones: staff reloading the page, or several of them, count once
    a minute (the page says when it counted). Never from before the last run's end, so that a run's outcome is not
    shown beside the backlog it has just changed."""
    counts = cache.get(COUNTS_CACHE_KEY)
    if not (
        counts
        and (counts.retention, counts.time_zone) == (retention, time_zone)
        and timezone.now() - counts.counted_at < COUNTS_MAX_AGE
        and (last_run is None or last_run.ended_at < counts.counted_at)
    ):
        counts = count_catalog(retention=retention, time_zone=time_zone)
        cache.set(COUNTS_CACHE_KEY, counts, COUNTS_MAX_AGE.total_seconds())
    return counts


def backlog_report(last_run: LastRun | None) -> dict:
    """The page's content at the limits the settings give (what the nightly run uses), with the overdue cards the
    last run left in the chart."""
    limit_rows = settings_rows()
    try:
        limits = PurgeLimits.from_settings()
    except PurgeLimitsError as error:
        return {"limit_rows": limit_rows, "settings_error": str(error)}
    counts = recent_counts(retention=limits.retention, time_zone=settings.CATALOG_TIME_ZONE, last_run=last_run)
    backlog, cutoff = counts.backlog, counts.backlog.cutoff
    held_back_after_overdue_objects, deletable_on = counts.held_back_after_overdue_objects, counts.deletable_on
    cards_per_run = limits.batch_size * limits.max_batches
    chart = BacklogChart(
        backlog=backlog, deletable_on=deletable_on, cards_per_night=cards_per_run,
        last_run_overdue=last_run.overdue_left if last_run else None,
    )
    oldest_object_overdue = backlog.property_objects.overdue_age(cutoff)
    return {
        "limit_rows": limit_rows,
        "limits": limits,
        "counted_at": counts.counted_at,
        "backlog": backlog,
        "days_past_due": {
            "property_objects": oldest_object_overdue / timedelta(days=1),
            "projects": backlog.projects.overdue_age(cutoff) / timedelta(days=1),
        },
        # Property objects alone, as the alert: an overdue project waits by design while objects of it remain.
        "past_goal": oldest_object_overdue > OVERDUE_AGE_GOAL,
        "goal_days": OVERDUE_AGE_GOAL.days,
        "projects_held_back": backlog.projects.held_back,
        "held_back_after_overdue_objects": held_back_after_overdue_objects,
        "cards_per_run": cards_per_run,
        "max_run_minutes": limits.max_duration / timedelta(minutes=1),
        "nightly_runs_needed": chart.nights_needed,
        "preview": preview_run(
            backlog=backlog, held_back_after_overdue_objects=held_back_after_overdue_objects,
            batch_size=limits.batch_size, max_batches=limits.max_batches,
        ),
        "chart": chart,
    }


@admin.register(DelistedRetention)
class DelistedRetentionAdmin(ReadOnlyAdmin):
    """Any staff user may look (the admin site lets in active staff alone); nobody may add, change or delete
    through it."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def get_urls(self):
        # The page alone: no change, delete or history views of the proxied project cards.
        view = self.admin_site.admin_view(self.changelist_view)
        return [path("", view, name="catalog_delistedretention_changelist")]

    def changelist_view(self, request, extra_context=None):
        return in_catalog_time_zone(self.retention_page, request)

    def retention_page(self, request):
        last_run = read_last_run()
        overdue = f"?{OverdueFilter.parameter_name}=overdue"
        context = {
            **self.admin_site.each_context(request),
            "title": "Delisted retention",
            "opts": self.model._meta,
            "moment_format": MOMENT_FORMAT,
            "overdue_lists": {
                "property_objects": reverse("admin:catalog_propertyobjectcard_changelist") + overdue,
                "projects": reverse("admin:catalog_projectcard_changelist") + overdue,
            },
            **backlog_report(last_run.get("last_run")),
            **last_run,
        }
        return TemplateResponse(request, "admin/catalog/delisted_retention.html", context)

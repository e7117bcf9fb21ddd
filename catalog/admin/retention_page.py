"""The "Delisted retention" admin page: what waits for the nightly job, at which limits, what the next run would do,
and how the last one went. Staff only, read-only, and a fixed number of queries whatever the table sizes: the
cards becoming deletable on each of the next days and after them (catalog.admin.retention_chart), which are those
within the retention window, the overdue cards of each kind (retention.backlog) and the projects held back now and
after the overdue objects, from which the preview of the next run is reckoned (retention.preview.preview_run) rather
than counted again and the chart drawn. The last run comes from the metrics sink the job writes
(retention.last_run.read_last_run, which `purge_delisted --last-run` reads with). The page's own statements and words
live here, with the catalog's admin; the job (retention/) knows nothing of the page. Its moments are in the
catalog's time zone, written as the card pages write them (catalog.admin.cards).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib import admin
from django.db import connection, transaction
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.timesince import timesince

from catalog.admin.cards import MOMENT_FORMAT, OverdueFilter, ReadOnlyAdmin, in_catalog_time_zone
from catalog.admin.retention_chart import CHART_DAYS, BacklogChart, DeletableOn, count_becoming_deletable
from catalog.models import DelistedRetention
from catalog.statements import STATEMENTS
from retention.backlog import Backlog, compute_cutoff, measure_backlog
from retention.last_run import LastRun, read_last_run
from retention.limits import LIMITS, PurgeLimits, PurgeLimitsError
from retention.preview import preview_run
from retention.results import Outcome
from retention.session import Session

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
    entries at 1M cards) doubled its time on 2 busy cores (34 against 17 ms): "page reads in one process"
    (docs/benchmark-findings.md, "The admin page at 1M cards, again")."""

    def __init__(self, cursor):
        super().__init__()
        self.cursor = cursor

    @classmethod
    @contextmanager
    def open(cls) -> Iterator["PageReads"]:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(STATEMENTS["page reads in one process"])
            yield cls(cursor)

    @contextmanager
    def transaction(self, *, writes: bool = False) -> Iterator:
        yield self.cursor


@dataclass(frozen=True)
class CatalogCounts:
    """What the page reads from the catalog, in one transaction: the backlog, the projects still held back once the
    overdue objects are gone, the cards becoming deletable on each of the chart's days."""

    backlog: Backlog
    held_back_after_overdue_objects: int
    deletable_on: list[DeletableOn]


def held_back_now_and_after(session: Session, *, cutoff: datetime) -> tuple[int, int]:
    """The overdue projects holding a property-object card now, and those still holding one once every overdue
    property object is gone: one statement, one index probe an overdue project."""
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["held back now and after"], {"cutoff": cutoff})
        return cursor.fetchone()


def count_catalog(*, retention: timedelta, time_zone: str) -> CatalogCounts:
    """The chart's per-day counts first: with the cards after its days they are every card within the retention
    window, which the backlog then takes from them instead of counting again."""
    with PageReads.open() as session:
        cutoff = compute_cutoff(session, retention)
        becoming_deletable = count_becoming_deletable(
            session, cutoff=cutoff, retention=retention, days=CHART_DAYS, time_zone=time_zone,
        )
        backlog = measure_backlog(
            session, cutoff=cutoff, count_held_back=False, within_window_from=becoming_deletable.within_window(cutoff),
        )
        held_back, held_back_after_overdue_objects = held_back_now_and_after(session, cutoff=cutoff)
        return CatalogCounts(
            backlog=replace(backlog, projects=replace(backlog.projects, held_back=held_back)),
            held_back_after_overdue_objects=held_back_after_overdue_objects,
            deletable_on=becoming_deletable.days,
        )


def held_back_after_run(preview: dict, backlog: Backlog, held_back_after_overdue_objects: int) -> tuple[int, bool]:
    """The overdue projects the previewed run leaves held back, and whether that is exact: it is when the run deletes
    every overdue property object; else it is an upper bound, the projects held back now (those whose last overdue
    objects the run reaches are freed)."""
    if preview["deleted_property_object_cards"] == backlog.property_objects.overdue:
        return held_back_after_overdue_objects, True
    return backlog.projects.held_back, False


def how_long_ago(moment: datetime) -> str:
    """"just now" within the minute (timesince would say "0 minutes"), else "5 minutes ago", "2 days, 3 hours ago"."""
    if timezone.now() - moment < timedelta(minutes=1):
        return "just now"
    return f"{timesince(moment)} ago"


def took(seconds: float) -> str:
    if seconds < 1:
        return "under a second"
    return f"{seconds:.0f} seconds" if seconds < 120 else f"{seconds / 60:.0f} minutes"


def backlog_report(last_run: LastRun | None) -> dict:
    """The page's content at the limits the settings give (what the nightly run uses), with the overdue cards the
    last run left in the chart."""
    limit_rows = settings_rows()
    try:
        limits = PurgeLimits.from_settings()
    except PurgeLimitsError as error:
        return {"limit_rows": limit_rows, "settings_error": str(error)}
    counts = count_catalog(retention=limits.retention, time_zone=settings.CATALOG_TIME_ZONE)
    backlog, cutoff = counts.backlog, counts.backlog.cutoff
    held_back_after_overdue_objects, deletable_on = counts.held_back_after_overdue_objects, counts.deletable_on
    cards_per_run = limits.batch_size * limits.max_batches
    chart = BacklogChart(
        backlog=backlog, deletable_on=deletable_on, cards_per_night=cards_per_run,
        last_run_overdue=last_run.overdue_left if last_run else None,
    )
    preview = preview_run(
        backlog=backlog, held_back_after_overdue_objects=held_back_after_overdue_objects,
        batch_size=limits.batch_size, max_batches=limits.max_batches,
    )
    preview_held_back, preview_held_back_exact = held_back_after_run(preview, backlog, held_back_after_overdue_objects)
    return {
        "limit_rows": limit_rows,
        "limits": limits,
        "backlog": backlog,
        "days_past_due": {kind: count.days_past_due(cutoff) for kind, count in backlog.by_kind().items()},
        # Property objects alone, as the alert: an overdue project waits by design while objects of it remain.
        "past_goal": backlog.property_objects.days_past_due(cutoff) > OVERDUE_AGE_GOAL / timedelta(days=1),
        "goal_days": OVERDUE_AGE_GOAL.days,
        "projects_held_back": backlog.projects.held_back,
        "held_back_after_overdue_objects": held_back_after_overdue_objects,
        "cards_per_run": cards_per_run,
        "max_run_minutes": limits.max_duration / timedelta(minutes=1),
        "nightly_runs_needed": chart.nights_needed,
        "preview": preview,
        "preview_held_back": preview_held_back,
        "preview_held_back_exact": preview_held_back_exact,
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
        run, sinks, sink_problems = read_last_run()
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
            **backlog_report(run),
            "last_run": run,
            "last_run_took": run and took(run.duration_seconds),
            "last_run_wording": run and OUTCOME_WORDING[run.outcome],
            "ended_ago": run and how_long_ago(run.ended_at),
            "last_success_ago": run and run.last_success_at and how_long_ago(run.last_success_at),
            "sinks": sinks,
            "sink_problems": sink_problems,
        }
        return TemplateResponse(request, "admin/catalog/delisted_retention.html", context)

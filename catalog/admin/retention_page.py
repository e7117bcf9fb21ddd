"""The "Delisted retention" admin page: what waits for the nightly job, at which limits, what the next run would do,
and how the last one went. Staff only, read-only, and a fixed number of queries whatever the table sizes: the
backlog aggregates, one held-back count and the cards becoming deletable on each of the next days
(retention.backlog, catalog.admin.retention_chart), from which the preview of the next run is reckoned
(retention.preview.preview_run) rather than counted again and the chart drawn. The last run comes from the metrics sink
the job writes (retention.last_run, which `purge_delisted --last-run` reads too). It lives with the catalog's admin;
the job (retention/) knows nothing of it.
"""

from datetime import timedelta

from django.conf import settings
from django.contrib import admin
from django.template.response import TemplateResponse
from django.urls import path

from catalog.admin.cards import ReadOnlyAdmin
from catalog.admin.retention_chart import CHART_DAYS, BacklogChart, count_becoming_deletable
from catalog.models import DelistedRetention
from retention.backlog import compute_cutoff, measure_backlog
from retention.last_run import LastRun, read_last_run
from retention.limits import LIMITS, PurgeLimits, PurgeLimitsError
from retention.preview import held_back_after, preview_run
from retention.session import Session


def settings_rows() -> list[tuple[str, str, object, str]]:
    """(description, setting, value as set, unit) of every limit, for the admin page's operators."""
    return [
        (limit.description, limit.setting, getattr(settings, limit.setting), limit.unit if limit.is_duration else "")
        for limit in LIMITS
    ]


def backlog_report(last_run: LastRun | None) -> dict:
    """The page's content at the limits the settings give (what the nightly run uses), with the overdue cards the
    last run left in the chart."""
    limit_rows = settings_rows()
    try:
        limits = PurgeLimits.from_settings()
    except PurgeLimitsError as error:
        return {"limit_rows": limit_rows, "settings_error": str(error)}
    session = Session()
    cutoff = compute_cutoff(session, limits.retention)
    backlog = measure_backlog(session, cutoff=cutoff)
    held_back_after_overdue_objects = held_back_after(session, cutoff=cutoff)
    cards_per_run = limits.batch_size * limits.max_batches
    chart = BacklogChart(
        backlog=backlog,
        deletable_on=count_becoming_deletable(session, cutoff=cutoff, retention=limits.retention, days=CHART_DAYS),
        cards_per_night=cards_per_run, last_run_overdue=last_run.overdue_left if last_run else None,
    )
    return {
        "limit_rows": limit_rows,
        "limits": limits,
        "backlog": backlog,
        "days_past_due": {
            "property_objects": backlog.property_objects.overdue_age(cutoff) / timedelta(days=1),
            "projects": backlog.projects.overdue_age(cutoff) / timedelta(days=1),
        },
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
        reading = read_last_run()
        context = {
            **self.admin_site.each_context(request),
            "title": "Delisted retention",
            "opts": self.model._meta,
            **backlog_report(reading.last_run),
            "last_run": reading.last_run,
            "sinks": reading.sinks,
            "sink_problems": reading.sink_problems,
        }
        return TemplateResponse(request, "admin/catalog/delisted_retention.html", context)

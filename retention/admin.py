"""The "Delisted retention" admin page: what waits for the nightly job, at which limits, what the next run would do,
and how the last one went. Staff only, read-only, and a fixed number of queries whatever the table sizes: the
backlog aggregates, one held-back count and the cards becoming deletable on each of the next days
(retention.backlog), from which the preview of the next run is reckoned (retention.preview.preview_run) rather than
counted again and the chart drawn (retention.chart). The last run comes from the metrics sink the job writes.
"""

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path

from catalog.admin import ReadOnlyAdmin
from retention.backlog import compute_cutoff, count_becoming_deletable, measure_backlog
from retention.chart import CHART_DAYS, BacklogChart, backlog_chart
from retention.limits import PurgeLimits, PurgeLimitsError, settings_rows
from retention.metrics import (
    BATCHES_PROCESSED,
    DELETED_OVERRIDES,
    DELETED_PROJECT_CARDS,
    DELETED_PROPERTY_OBJECT_CARDS,
    LAST_SUCCESS,
    configured_sinks,
)
from retention.models import DelistedRetention
from retention.preview import held_back_after, preview_run
from retention.results import Outcome
from retention.session import Session

# A page must not hang on a Pushgateway that accepts connections and never answers.
SINK_READ_TIMEOUT_SECONDS = 2

OUTCOME_WORDING = {
    Outcome.COMPLETED: "completed: every overdue card it could delete is gone",
    Outcome.HAS_MORE: "has more: stopped on a limit with overdue cards left for the next run",
    Outcome.STOPPED: "stopped by a signal before it finished",
    Outcome.LOCK_BUSY: "skipped: another run held the lock",
    Outcome.FAILED: "failed: a batch rolled back or cards could not be deleted; see the run's log",
}
# Outcomes of runs that ended with a result: the batches and the backlog they exported are their own.
OUTCOMES_WITH_A_RESULT = (Outcome.COMPLETED, Outcome.HAS_MORE, Outcome.STOPPED)


@dataclass(frozen=True)
class LastRun:
    """The latest run as a metrics sink holds it. `batches` and the overdue cards it left are None when that run
    exported none of its own (a failure, a skip)."""

    source: str
    outcome: str
    wording: str
    ended_at: datetime
    last_success_at: datetime | None
    batches: int | None
    overdue_property_objects_left: int | None
    overdue_projects_left: int | None
    runs_by_outcome: dict[str, int]
    deleted_property_object_cards: int
    deleted_project_cards: int
    deleted_overrides: int


def read_last_run() -> dict:
    """The latest run from the first configured sink that recorded one, or why there is none to show."""
    sinks = configured_sinks()
    problems = []
    for sink in sinks:
        try:
            metrics = sink.read(timeout=SINK_READ_TIMEOUT_SECONDS)
        except Exception as error:  # a missing gateway, an unreadable file: the page shows it and goes on
            problems.append(f"{sink}: {error}")
            continue
        if metrics.last_run is None:
            continue
        outcome, ended = metrics.last_run
        own_result = outcome in OUTCOMES_WITH_A_RESULT
        last_success = metrics.gauges.get(LAST_SUCCESS)
        return {
            "last_run": LastRun(
                source=str(sink),
                outcome=outcome,
                wording=OUTCOME_WORDING[outcome],
                ended_at=datetime.fromtimestamp(ended, UTC),
                last_success_at=datetime.fromtimestamp(last_success, UTC) if last_success is not None else None,
                batches=int(metrics.gauges.get(BATCHES_PROCESSED, 0)) if own_result else None,
                overdue_property_objects_left=(
                    int(metrics.backlog.get(("property_object", "overdue"), 0)) if own_result else None
                ),
                overdue_projects_left=int(metrics.backlog.get(("project", "overdue"), 0)) if own_result else None,
                runs_by_outcome={name: int(count) for name, count in metrics.runs.items()},
                deleted_property_object_cards=int(metrics.counters[DELETED_PROPERTY_OBJECT_CARDS]),
                deleted_project_cards=int(metrics.counters[DELETED_PROJECT_CARDS]),
                deleted_overrides=int(metrics.counters[DELETED_OVERRIDES]),
            )
        }
    return {"sinks": [str(sink) for sink in sinks], "sink_problems": problems}


def days(duration: timedelta) -> float:
    return duration / timedelta(days=1)


def backlog_report(*, using: str = "default") -> dict:
    """The page's content at the limits the settings give (what the nightly run uses)."""
    limit_rows = settings_rows()
    try:
        limits = PurgeLimits.from_settings()
    except PurgeLimitsError as error:
        return {"limit_rows": limit_rows, "settings_error": str(error)}
    session = Session(using)
    cutoff = compute_cutoff(session, limits.retention)
    backlog = measure_backlog(session, cutoff=cutoff)
    held_back_after_overdue_objects = held_back_after(session, cutoff=cutoff)
    cards_per_run = limits.batch_size * limits.max_batches
    return {
        "limit_rows": limit_rows,
        "backlog": backlog,
        "deletable_on": count_becoming_deletable(session, cutoff=cutoff, retention=limits.retention, days=CHART_DAYS),
        "days_past_due": {
            "property_objects": days(backlog.property_objects.overdue_age(cutoff)),
            "projects": days(backlog.projects.overdue_age(cutoff)),
        },
        "projects_held_back": backlog.projects.held_back,
        "held_back_after_overdue_objects": held_back_after_overdue_objects,
        "cards_per_run": cards_per_run,
        "nightly_runs_needed": math.ceil(backlog.overdue_cards / cards_per_run),
        "preview": preview_run(
            backlog=backlog, held_back_after_overdue_objects=held_back_after_overdue_objects,
            batch_size=limits.batch_size, max_batches=limits.max_batches,
        ),
    }


def chart_of(report: dict, last_run: LastRun | None) -> BacklogChart | None:
    """The backlog chart of a backlog_report, with the overdue cards the last run left when the sink holds them."""
    if "settings_error" in report:
        return None
    left_by_last_run = None
    if last_run is not None and last_run.overdue_property_objects_left is not None:
        left_by_last_run = (last_run.overdue_property_objects_left, last_run.overdue_projects_left)
    return backlog_chart(
        backlog=report["backlog"], deletable_on=report["deletable_on"], cards_per_night=report["cards_per_run"],
        nights_needed=report["nightly_runs_needed"], last_run_overdue=left_by_last_run,
    )


@admin.register(DelistedRetention)
class DelistedRetentionAdmin(ReadOnlyAdmin):
    """Any staff user may look; nobody may add, change or delete through it."""

    def has_module_permission(self, request):
        return request.user.is_active and request.user.is_staff

    def has_view_permission(self, request, obj=None):
        return self.has_module_permission(request)

    def get_urls(self):
        # The page alone: no change, delete or history views of the proxied project cards.
        opts = self.model._meta
        name = f"{opts.app_label}_{opts.model_name}_changelist"
        return [path("", self.admin_site.admin_view(self.changelist_view), name=name)]

    def changelist_view(self, request, extra_context=None):
        if not self.has_view_permission(request):
            raise PermissionDenied
        report = backlog_report()
        last_run = read_last_run()
        context = {
            **self.admin_site.each_context(request),
            "title": "Delisted retention",
            "opts": self.model._meta,
            **report,
            **last_run,
            "chart": chart_of(report, last_run.get("last_run")),
        }
        return TemplateResponse(request, "admin/retention/delisted_retention.html", context)

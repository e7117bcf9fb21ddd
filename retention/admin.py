"""The "Delisted retention" admin page: what waits for the nightly job, at which limits, and what the next run
would do. Staff only, read-only, and a fixed number of queries whatever the table sizes (aggregates over the
partial indexes, one held-back count, and the dry-run preview, itself a fixed set of COUNTs)."""

import math

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.template.response import TemplateResponse
from django.urls import path

from catalog.admin import ReadOnlyAdmin
from retention.backlog import compute_cutoff, measure_backlog
from retention.limits import PurgeLimits, PurgeLimitsError, settings_rows
from retention.models import DelistedRetention
from retention.service import purge_delisted_cards


def backlog_report(*, using: str = "default") -> dict:
    """The page's content at the limits the settings give (what the nightly run uses)."""
    limit_rows = settings_rows()
    try:
        limits = PurgeLimits.from_settings()
    except PurgeLimitsError as error:
        return {"limit_rows": limit_rows, "settings_error": str(error)}
    cutoff = compute_cutoff(limits.retention, None, using)
    backlog = measure_backlog(cutoff=cutoff, using=using)
    cards_per_run = limits.batch_size * limits.max_batches
    return {
        "limit_rows": limit_rows,
        "backlog": backlog,
        "projects_held_back": backlog.projects.held_back,
        "cards_per_run": cards_per_run,
        "nightly_runs_needed": math.ceil(backlog.overdue_cards / cards_per_run),
        "preview": purge_delisted_cards(limits, dry_run=True, using=using),
    }


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
        context = {
            **self.admin_site.each_context(request),
            "title": "Delisted retention",
            "opts": self.model._meta,
            **backlog_report(),
        }
        return TemplateResponse(request, "admin/retention/delisted_retention.html", context)

"""Read-only admin of the catalog: staff may look at any row, and nobody may add, change or delete one.

The cards are a replica of the source system, and any write to a Delisted card would reset its retention clock
(its `updated_at` is the delisting moment the purge job ages it by).

Every page of the catalog's admin writes moments one way (MOMENT_FORMAT, in CATALOG_TIME_ZONE), prices and counts
with thousands separators, as the Delisted retention page does.

The lists stay fast at millions of rows by design: no COUNT(*) over a whole table (EstimatedCountPaginator), pages
read through the sort indexes of migration 0003, and sorting only by indexed columns.
"""

from datetime import datetime, timedelta
from functools import cached_property

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.template.defaultfilters import floatformat
from django.template.response import SimpleTemplateResponse
from django.utils import timezone
from django.utils.dateformat import format as date_format
from django.utils.timesince import timesince, timeuntil

from catalog.models import (
    BuildingDisplayOverride,
    CardStatus,
    DeveloperRankingRule,
    ProjectCard,
    PropertyObjectCard,
    PropertyObjectDisplayOverride,
)

# The app has no public site at "/" (it answers 404): no "View site" link in the admin's header.
admin.site.site_url = None

# How the catalog's admin writes a moment (Django's date format): 2026-12-07 03:30 MSK.
MOMENT_FORMAT = "Y-m-d H:i e"


def moment(value: datetime) -> str:
    """`value` as the catalog's admin writes it, in the time zone active while the page renders
    (in_catalog_time_zone)."""
    return date_format(timezone.localtime(value), MOMENT_FORMAT)


def in_catalog_time_zone(view, *args):
    """Call an admin view and render its page with CATALOG_TIME_ZONE active. A TemplateResponse renders after the
    view returns, outside any `timezone.override` of the view's own: it is rendered here, inside."""
    with timezone.override(settings.CATALOG_TIME_ZONE):
        response = view(*args)
        if isinstance(response, SimpleTemplateResponse):
            response.render()
        return response


def planner_row_estimate(queryset: QuerySet) -> int:
    """How many rows the planner expects `queryset` to match (EXPLAIN: nothing is executed)."""
    query_sql, params = queryset.query.sql_with_params()
    with connections[queryset.db].cursor() as cursor:
        cursor.execute(f"EXPLAIN (FORMAT JSON) {query_sql}", params)
        (plan,) = cursor.fetchone()[0]  # psycopg decodes the json column
    return round(plan["Plan"]["Plan Rows"])


class EstimatedCountPaginator(Paginator):
    """Pagination of tables of millions of rows.

    The count is exact up to `exact_count_limit` (a count that stops there), and past it the planner's estimate of the
    filtered query, shown as "about N": never a COUNT(*) over the whole table. A page's rows are read by id, and the
    ids come from the sort index alone (an index-only scan), so a deep OFFSET skips index entries, not table rows
    (page 400 costs about what page 1 does). The cost still grows with the depth, so the list goes `max_pages`
    deep (a search engine's result window): a page past that shows the deepest one, and the page says how to reach
    the rest (the other sort order, a filter, a search). With an estimate the last page links may be a little off;
    the rows themselves are always exact.
    """

    exact_count_limit = 10_000
    max_pages = 1_000
    count_is_estimate = False
    # A list whose filter the planner misjudges counts exactly, whatever its size (the overdue cards: CardAdmin).
    always_exact = False

    @cached_property
    def count(self) -> int:
        if self.always_exact:
            return self.object_list.order_by().count()
        bounded = self.object_list.order_by().values("pk")[: self.exact_count_limit + 1].count()
        if bounded <= self.exact_count_limit:
            return bounded
        self.count_is_estimate = True
        return max(bounded, planner_row_estimate(self.object_list.order_by()))

    @cached_property
    def num_pages(self) -> int:
        return min(super().num_pages, self.max_pages)

    @property
    def is_capped(self) -> bool:
        """Whether rows lie past the deepest listed page."""
        return self.count > self.max_pages * self.per_page

    def validate_number(self, number):
        if self.is_capped and isinstance(number, int) and number > self.num_pages:
            number = self.num_pages  # rather than the admin's "something's wrong with your database" page
        return super().validate_number(number)

    def _get_page(self, object_list, number, paginator):
        # Paginator.page's hook for the page object; object_list is the sliced queryset of this page.
        page_rows = self.object_list.filter(pk__in=object_list.values("pk"))
        return super()._get_page(page_rows, number, paginator)


class ReadOnlyAdmin(admin.ModelAdmin):
    """View permission only, so the change page renders read-only and a POST to it answers 403.

    Search is an exact match on the `search_fields`, done here rather than with Django's `=field`: on a uuid
    column that compares `UPPER(id::text)`, a full scan that no index serves (1.6 s on a million cards). Each
    field parses the term instead; a field it is not a valid value of (a word for a uuid, a uuid for a number) is
    skipped, and a term no field accepts lists nothing.
    """

    paginator = EstimatedCountPaginator
    # The catalog tables are big: skip the second count, the one over the whole table.
    show_full_result_count = False

    class Media:
        css = {"all": ["catalog/admin.css"]}  # ids on one line

    def changelist_view(self, request, extra_context=None):
        return in_catalog_time_zone(super().changelist_view, request, extra_context)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        return in_catalog_time_zone(super().change_view, request, object_id, form_url, extra_context)

    # Every catalog table has both moments: shown by the methods below, on the lists and the change pages alike.
    exclude = ["created_at", "updated_at"]
    readonly_fields = ["created", "updated"]

    @admin.display(description="updated at", ordering="updated_at")
    def updated(self, row) -> str:
        return moment(row.updated_at)

    @admin.display(description="created at")
    def created(self, row) -> str:
        return moment(row.created_at)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def get_search_results(self, request, queryset, search_term):
        term = search_term.strip()
        if not term:
            return queryset, False
        matches = Q()
        for name in self.get_search_fields(request):
            try:
                value = self.model._meta.get_field(name).to_python(term)
            except ValidationError:
                continue
            matches |= Q((name, value))
        return (queryset.filter(matches) if matches else queryset.none()), False


class OverdueFilter(admin.SimpleListFilter):
    """The cards the nightly job deletes: Delisted for longer than the retention period, on the database clock as
    the job's cutoff is. The Delisted retention page links here."""

    title = "deletion"
    parameter_name = "deletion"

    def lookups(self, request, model_admin):
        return [("overdue", "Overdue: the nightly job deletes them")]

    def queryset(self, request, queryset):
        if self.value() != "overdue":
            return queryset
        retention = timedelta(days=settings.DELISTED_RETENTION_PERIOD_DAYS)
        return queryset.filter(status=CardStatus.DELISTED, updated_at__lt=Now() - retention)


class CardAdmin(ReadOnlyAdmin):
    list_filter = ["status", OverdueFilter]

    def get_paginator(self, request, queryset, per_page, orphans=0, allow_empty_first_page=True):
        """The overdue cards counted exactly, as the retention page counts them (one index-only count of the partial
        Delisted index, 20 ms for 200,000): the planner, taking status and age for independent, put them at a
        quarter of that, and the list would contradict the page that links to it."""
        paginator = super().get_paginator(request, queryset, per_page, orphans, allow_empty_first_page)
        # No request: a paginator asked for outside a page (the bench's deepest page).
        paginator.always_exact = request is not None and request.GET.get(OverdueFilter.parameter_name) == "overdue"
        return paginator
    # Rendering its rows, not the table's size, is most of a changelist page's time (docs/benchmarks.md, section 7).
    list_per_page = 50
    # Served backwards by the (updated_at, id) and (status, updated_at, id) indexes; id makes deep pages one order.
    ordering = ["-updated_at", "-id"]
    # Only what an index sorts: any other column would sort the whole table on every page.
    sortable_by = ["updated"]

    def get_readonly_fields(self, request, obj=None):
        if obj is not None and obj.status == CardStatus.DELISTED:
            return [*super().get_readonly_fields(request, obj), "deletable_after"]
        return super().get_readonly_fields(request, obj)

    @admin.display(description="Deletable after")
    def deletable_after(self, card):
        """A Delisted card's delisting moment plus the retention period: the first nightly run after it deletes
        the card (a project only once none of its property objects remains)."""
        try:
            deletable = card.updated_at + timedelta(days=settings.DELISTED_RETENTION_PERIOD_DAYS)
        except OverflowError:
            return "— (DELISTED_RETENTION_PERIOD_DAYS is out of range)"
        when = moment(deletable)
        timing = f"in {timeuntil(deletable)}" if deletable > timezone.now() else f"overdue for {timesince(deletable)}"
        if isinstance(card, ProjectCard):
            return f"{when} ({timing}), once none of its property-object cards remains"
        return f"{when} ({timing})"


@admin.register(ProjectCard)
class ProjectCardAdmin(CardAdmin):
    list_display = ["id", "title", "status", "developer_id", "updated"]
    search_fields = ["id"]
    search_help_text = "Exact project id (uuid)"


@admin.register(PropertyObjectCard)
class PropertyObjectCardAdmin(CardAdmin):
    list_display = ["id", "title", "status", "price_shown", "project_id", "updated"]
    search_fields = ["id", "project_id"]
    search_help_text = "Exact property object id or project id (uuid)"
    exclude = ["price", *ReadOnlyAdmin.exclude]
    readonly_fields = ["price_shown", *ReadOnlyAdmin.readonly_fields]

    @admin.display(description="price")
    def price_shown(self, card) -> str:
        """With thousands separators, and kopecks only when there are any: 44,232,000."""
        return self.get_empty_value_display() if card.price is None else floatformat(card.price, "-2g")


@admin.register(PropertyObjectDisplayOverride)
class PropertyObjectDisplayOverrideAdmin(ReadOnlyAdmin):
    list_display = ["id", "property_object_id", "field", "is_deleted", "updated"]
    list_filter = ["is_deleted"]
    search_fields = ["id", "property_object_id"]
    search_help_text = "Exact override id (number) or property object id (uuid)"


@admin.register(BuildingDisplayOverride)
class BuildingDisplayOverrideAdmin(ReadOnlyAdmin):
    list_display = ["id", "project_id", "building_code", "field", "is_deleted", "updated"]
    list_filter = ["is_deleted"]
    search_fields = ["id", "project_id"]
    search_help_text = "Exact override id (number) or project id (uuid)"


@admin.register(DeveloperRankingRule)
class DeveloperRankingRuleAdmin(ReadOnlyAdmin):
    list_display = ["id", "developer_id", "project_id", "weight", "updated"]
    search_fields = ["id", "developer_id", "project_id"]
    search_help_text = "Exact rule id (number), developer id or project id (uuid)"

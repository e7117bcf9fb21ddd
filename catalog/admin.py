"""Read-only admin of the catalog: staff may look at any row, and nobody may add, change or delete one.

The cards are a replica of the source system, and any write to a Delisted card would reset its retention clock
(its `updated_at` is the delisting moment the purge job ages it by).
"""

from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Q

from catalog.models import (
    BuildingDisplayOverride,
    DeveloperRankingRule,
    ProjectCard,
    PropertyObjectCard,
    PropertyObjectDisplayOverride,
)


class ReadOnlyAdmin(admin.ModelAdmin):
    """View permission only, so the change page renders read-only and a POST to it answers 403.

    Search is an exact match on the `search_fields`, done here rather than with Django's `=field`: on a uuid
    column that compares `UPPER(id::text)`, a full scan that no index serves (1.6 s on a million cards). Each
    field parses the term instead; a field it is not a valid value of (a word for a uuid, a uuid for a number) is
    skipped, and a term no field accepts lists nothing.
    """

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


class CardAdmin(ReadOnlyAdmin):
    list_filter = ["status"]
    ordering = ["-updated_at"]
    # The cards tables are big: skip the second COUNT(*) over the whole table.
    show_full_result_count = False


@admin.register(ProjectCard)
class ProjectCardAdmin(CardAdmin):
    list_display = ["id", "title", "status", "developer_id", "updated_at"]
    search_fields = ["id"]
    search_help_text = "Exact project id (uuid)"


@admin.register(PropertyObjectCard)
class PropertyObjectCardAdmin(CardAdmin):
    list_display = ["id", "title", "status", "price", "project_id", "updated_at"]
    search_fields = ["id", "project_id"]
    search_help_text = "Exact property object id or project id (uuid)"


@admin.register(PropertyObjectDisplayOverride)
class PropertyObjectDisplayOverrideAdmin(ReadOnlyAdmin):
    list_display = ["id", "property_object_id", "field", "is_deleted", "updated_at"]
    list_filter = ["is_deleted"]
    search_fields = ["id", "property_object_id"]
    search_help_text = "Exact override id (number) or property object id (uuid)"


@admin.register(BuildingDisplayOverride)
class BuildingDisplayOverrideAdmin(ReadOnlyAdmin):
    list_display = ["id", "project_id", "building_code", "field", "is_deleted", "updated_at"]
    list_filter = ["is_deleted"]
    search_fields = ["id", "project_id"]
    search_help_text = "Exact override id (number) or project id (uuid)"


@admin.register(DeveloperRankingRule)
class DeveloperRankingRuleAdmin(ReadOnlyAdmin):
    list_display = ["id", "developer_id", "project_id", "weight", "updated_at"]
    search_fields = ["id", "developer_id", "project_id"]
    search_help_text = "Exact rule id (number), developer id or project id (uuid)"

from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from django_prometheus.exports import ExportToDjangoView

from config.metrics_auth import bearer_token_required

urlpatterns = [
    # The Delisted retention page's address before it moved to the catalog's admin, kept for bookmarks and runbooks.
    path("admin/retention/delistedretention/",
         RedirectView.as_view(pattern_name="admin:catalog_delistedretention_changelist", permanent=True)),
    path("admin/", admin.site.urls),
    path("catalog/", include("catalog.urls")),
    path("metrics", bearer_token_required(ExportToDjangoView), name="prometheus-django-metrics"),
]

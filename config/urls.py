from django.contrib import admin
from django.urls import include, path
from django_prometheus.exports import ExportToDjangoView

from config.metrics_auth import bearer_token_required

urlpatterns = [
    path("admin/", admin.site.urls),
    path("catalog/", include("catalog.urls")),
    path("metrics", bearer_token_required(ExportToDjangoView), name="prometheus-django-metrics"),
]

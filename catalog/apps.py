from django.apps import AppConfig
from prometheus_client import REGISTRY


class CatalogConfig(AppConfig):
    name = "catalog"
    verbose_name = "Catalog"

    def ready(self):
        from catalog.metrics import BacklogCollector

        # The web app's /metrics (django-prometheus serves the default registry) reports the retention backlog live.
        self.backlog_collector = BacklogCollector()
        REGISTRY.register(self.backlog_collector)

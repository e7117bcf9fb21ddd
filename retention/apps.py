from django.apps import AppConfig
from prometheus_client import REGISTRY


class RetentionConfig(AppConfig):
    name = "retention"
    verbose_name = "Delisted retention"

    def ready(self):
        from retention import checks  # noqa: F401  (registers the settings check)
        from retention.metrics import BacklogCollector

        # The web app's /metrics (django-prometheus serves the default registry) reports the backlog live.
        self.backlog_collector = BacklogCollector()
        REGISTRY.register(self.backlog_collector)

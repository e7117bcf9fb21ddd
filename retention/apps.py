from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "retention"
    verbose_name = "Delisted retention"

    def ready(self):
        from retention import checks  # noqa: F401  (registers the settings check)

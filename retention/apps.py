"""The retention app. `manage.py check` validates the retention settings by the job's own rules, so a bad deploy fails
at `check` (or `migrate`), not at 03:30; every bad setting is reported, each on its own line."""

from django.apps import AppConfig
from django.core import checks

from retention.limits import PurgeLimits, PurgeLimitsError


class RetentionConfig(AppConfig):
    name = "retention"
    verbose_name = "Delisted retention"

    def ready(self):
        checks.register(check_retention_settings)


def check_retention_settings(app_configs, **kwargs) -> list[checks.CheckMessage]:
    try:
        PurgeLimits.from_settings()
    except PurgeLimitsError as error:
        hint = "purge_delisted would refuse to run with this value; fix the environment variable."
        return [checks.Error(f"{limit.setting}: {message}", hint=hint, id="retention.E001")
                for limit, message in error.problems]
    return []

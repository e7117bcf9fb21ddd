"""`manage.py check` validates the retention settings by the job's own rules, so a bad deploy fails at `check`
(or `migrate`), not at 03:30. Every bad setting is reported, each on its own line."""

from django.core import checks

from retention.limits import PurgeLimits, PurgeLimitsError


@checks.register()
def check_retention_settings(app_configs, **kwargs) -> list[checks.CheckMessage]:
    try:
        PurgeLimits.from_settings()
    except PurgeLimitsError as error:
        return [
            checks.Error(
                f"{limit.setting}: {message}",
                hint="purge_delisted would refuse to run with this value; fix the environment variable.",
                id="retention.E001",
            )
            for limit, message in error.problems
        ]
    return []

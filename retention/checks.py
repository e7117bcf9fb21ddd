"""`manage.py check` validates the retention settings by the job's own rules, so a bad deploy fails at `check`
(or `migrate`), not at 03:30. Every bad setting is reported, each on its own line."""

from django.conf import settings
from django.core import checks

from retention.limits import PurgeLimits, PurgeLimitsError
from retention.locks import SESSION_POOL

POOLER_DECLARATION = (
    f"DELISTED_RETENTION_POOLER: must be {SESSION_POOL!r} (a session pool) or empty (no pooler), got {{value!r}}"
)


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


@checks.register()
def check_pooler_declaration(app_configs, **kwargs) -> list[checks.CheckMessage]:
    if settings.DELISTED_RETENTION_POOLER in ("", SESSION_POOL):
        return []
    return [
        checks.Error(
            POOLER_DECLARATION.format(value=settings.DELISTED_RETENTION_POOLER),
            hint="transaction and statement pools cannot hold the job's session lock (README: The advisory lock).",
            id="retention.E002",
        )
    ]

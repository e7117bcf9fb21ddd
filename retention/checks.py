"""`manage.py check` validates the retention settings by the job's own rules, so a bad deploy fails at `check`
(or `migrate`), not at 03:30."""

from django.core import checks

from retention.conf import SETTING_OF_LIMIT, limits_from_settings
from retention.service import PurgeSettingsError, validate_limits


@checks.register()
def check_retention_settings(app_configs, **kwargs) -> list[checks.CheckMessage]:
    try:
        validate_limits(**limits_from_settings())
    except PurgeSettingsError as error:
        return [
            checks.Error(
                f"{SETTING_OF_LIMIT[error.field]}: {error}",
                hint="purge_delisted would refuse to run with this value; fix the environment variable.",
                id="retention.E001",
            )
        ]
    return []

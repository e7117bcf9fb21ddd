"""The retention job's limits as the settings give them, for the system check and the admin page (the command
reads its options first). One table, so both name the same variable an operator sets."""

from datetime import timedelta

from django.conf import settings

from retention.service import PurgeSettingsError

SETTING_OF_LIMIT = {
    "retention": "DELISTED_RETENTION_PERIOD_DAYS",
    "batch_size": "DELISTED_RETENTION_BATCH_SIZE",
    "max_batches": "DELISTED_RETENTION_MAX_BATCHES_PER_RUN",
    "max_duration": "DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS",
    "batch_pause": "DELISTED_RETENTION_BATCH_PAUSE_MS",
    "statement_timeout": "DELISTED_RETENTION_STATEMENT_TIMEOUT_MS",
    "lock_timeout": "DELISTED_RETENTION_LOCK_TIMEOUT_MS",
}
# The unit of each duration setting; the others are counts.
UNIT_OF_LIMIT = {
    "retention": "days",
    "max_duration": "seconds",
    "batch_pause": "milliseconds",
    "statement_timeout": "milliseconds",
    "lock_timeout": "milliseconds",
}


def limits_from_settings() -> dict[str, int | timedelta]:
    """Keyword arguments for validate_limits / purge_delisted_cards. A duration too large for a timedelta is a
    PurgeSettingsError like any other bad limit."""
    limits: dict[str, int | timedelta] = {}
    for limit, setting in SETTING_OF_LIMIT.items():
        value = getattr(settings, setting)
        unit = UNIT_OF_LIMIT.get(limit)
        try:
            limits[limit] = timedelta(**{unit: value}) if unit else value
        except OverflowError:
            raise PurgeSettingsError(limit, f"{value} {unit} is too large") from None
    return limits

"""`manage.py check` refuses the retention settings the job would refuse, naming the variable."""

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from tests.support import run_manage


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("DELISTED_RETENTION_PERIOD_DAYS", 0),
        ("DELISTED_RETENTION_PERIOD_DAYS", -1),
        ("DELISTED_RETENTION_PERIOD_DAYS", 10**12),  # too large for a timedelta
        ("DELISTED_RETENTION_BATCH_SIZE", 0),
        ("DELISTED_RETENTION_BATCH_SIZE", 10_001),
        ("DELISTED_RETENTION_MAX_BATCHES_PER_RUN", 0),
        ("DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS", 0),
        ("DELISTED_RETENTION_BATCH_PAUSE_MS", -1),
        ("DELISTED_RETENTION_STATEMENT_TIMEOUT_MS", 0),
        ("DELISTED_RETENTION_LOCK_TIMEOUT_MS", 0),
    ],
)
def test_check_fails_on_each_bad_retention_setting(settings, setting, value):
    setattr(settings, setting, value)

    with pytest.raises(SystemCheckError, match=rf"retention\.E001\) {setting}: "):
        call_command("check")


def test_check_passes_with_the_default_settings():
    call_command("check")


@pytest.mark.django_db
def test_manage_py_check_exits_non_zero_on_a_bad_environment_variable():
    completed = run_manage("check", DELISTED_RETENTION_MAX_BATCHES_PER_RUN="0")

    assert completed.returncode != 0
    assert "(retention.E001) DELISTED_RETENTION_MAX_BATCHES_PER_RUN: max batches per run must be between 1 and" in (
        completed.stderr
    )


@pytest.mark.django_db
def test_purge_delisted_runs_when_its_options_override_a_bad_setting():
    completed = run_manage("purge_delisted", "--batch-size", "500", DELISTED_RETENTION_BATCH_SIZE="0")

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.startswith("purge completed")

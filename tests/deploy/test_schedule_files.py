"""The schedule units under deploy/: 03:30 Europe/Moscow, one run at a time, a graceful stop longer than a batch."""

import configparser
import shutil
import subprocess

import pytest
import yaml
from django.conf import settings

from tests.support import PROJECT_ROOT

DEPLOY = PROJECT_ROOT / "deploy"
# A batch is two statements, each bounded by the statement timeout: a graceful stop must outlast both.
LONGEST_BATCH_SECONDS = 2 * settings.DELISTED_RETENTION_STATEMENT_TIMEOUT_MS / 1000
MAX_RUN_DURATION_SECONDS = settings.DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS


def systemd_unit(name: str) -> configparser.ConfigParser:
    unit = configparser.ConfigParser(interpolation=None, strict=False)  # systemd repeats keys (Environment=)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read_string((DEPLOY / "systemd" / name).read_text())
    return unit


def test_systemd_timer_fires_at_0330_moscow_and_catches_up_missed_nights():
    timer = systemd_unit("catalog-delisted-retention.timer")["Timer"]

    assert timer["OnCalendar"] == "*-*-* 03:30:00 Europe/Moscow"
    assert timer["Persistent"] == "true"
    assert timer["Unit"] == "catalog-delisted-retention.service"


def test_systemd_analyze_accepts_the_timer_expression():
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not on this machine (it comes with systemd)")
    expression = systemd_unit("catalog-delisted-retention.timer")["Timer"]["OnCalendar"]

    checked = subprocess.run(
        ["systemd-analyze", "calendar", expression], capture_output=True, text=True, timeout=30
    )

    assert checked.returncode == 0, checked.stderr
    assert "Normalized form: *-*-* 03:30:00 Europe/Moscow" in checked.stdout


def test_systemd_service_stops_gracefully_with_a_timeout_longer_than_a_batch():
    service = systemd_unit("catalog-delisted-retention.service")["Service"]

    assert service["Type"] == "oneshot"
    assert service["ExecStart"].endswith("manage.py purge_delisted")
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > LONGEST_BATCH_SECONDS
    assert service["TimeoutStartSec"] == "30min" and 30 * 60 > MAX_RUN_DURATION_SECONDS


def test_crontab_runs_at_0330_moscow_time():
    lines = [
        line for line in (DEPLOY / "cron" / "catalog-delisted-retention").read_text().splitlines()
        if line and not line.startswith("#")
    ]

    assert "CRON_TZ=Europe/Moscow" in lines
    (job,) = [line for line in lines if line[0].isdigit()]
    assert job.split()[:5] == ["30", "3", "*", "*", "*"]
    assert "manage.py purge_delisted" in job


def test_kubernetes_cronjob_runs_one_at_a_time_at_0330_moscow_and_stops_gracefully():
    (cronjob,) = yaml.safe_load_all((DEPLOY / "k8s" / "catalog-delisted-retention-cronjob.yaml").read_text())

    assert (cronjob["apiVersion"], cronjob["kind"]) == ("batch/v1", "CronJob")
    spec = cronjob["spec"]
    assert spec["schedule"] == "30 3 * * *" and spec["timeZone"] == "Europe/Moscow"
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] > 0
    job = spec["jobTemplate"]["spec"]
    assert job["activeDeadlineSeconds"] > MAX_RUN_DURATION_SECONDS + LONGEST_BATCH_SECONDS
    pod = job["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > LONGEST_BATCH_SECONDS
    (container,) = pod["containers"]
    assert container["command"][-2:] == ["manage.py", "purge_delisted"]

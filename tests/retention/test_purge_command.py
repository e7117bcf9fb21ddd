"""The CLI surface of `manage.py purge_delisted`: output, exit status, lock, signals, real processes."""

import json
import signal
import subprocess
import time
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from catalog.models import CardStatus, PropertyObjectCard
from tests.support import (
    PROJECT_ROOT, deletes_refused, job_lock_held_elsewhere, manage_command, manage_env, run_manage,
)
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

pytestmark = pytest.mark.django_db

RESULT_FIELDS = {
    "run_id", "cutoff", "stop_reason", "has_more", "deleted_property_object_cards", "deleted_project_cards",
    "deleted_property_object_overrides", "deleted_building_overrides", "deleted_overrides", "batches_processed",
    "batch_retries", "projects_held_back", "overdue_property_object_cards", "overdue_project_cards",
    "duration_seconds", "dry_run", "outcome", "culprits", "culprit_count", "uncertain_cards", "error",
    "replica_lag_wait_seconds", "trace_id",
}


def overdue_objects(count: int) -> None:
    project = ProjectCardFactory()
    PropertyObjectCardFactory.create_batch(
        count, project_id=project.id, status=CardStatus.DELISTED, updated_at=timezone.now() - timedelta(days=40)
    )


def purge_json(*args: str) -> dict:
    out = StringIO()
    call_command("purge_delisted", "--json", *args, stdout=out)
    return json.loads(out.getvalue())


def test_json_output_is_one_object_with_every_result_field():
    overdue_objects(3)

    out = StringIO()
    call_command("purge_delisted", "--json", "--batch-size", "2", stdout=out)

    result = json.loads(out.getvalue())
    assert set(result) == RESULT_FIELDS
    assert result["deleted_property_object_cards"] == 3 and result["batches_processed"] == 2
    assert result["stop_reason"] == "completed" and result["has_more"] is False
    assert result["cutoff"].endswith("+00:00")
    assert out.getvalue().count("\n") == 1


def test_text_output_summarises_the_run():
    overdue_objects(2)

    out = StringIO()
    call_command("purge_delisted", stdout=out)

    assert out.getvalue().startswith("purge completed: deleted 2 property object cards, 0 project cards")


def test_options_override_settings(settings):
    settings.DELISTED_RETENTION_BATCH_SIZE = 1
    settings.DELISTED_RETENTION_MAX_BATCHES_PER_RUN = 1
    overdue_objects(3)

    assert purge_json()["deleted_property_object_cards"] == 1
    assert purge_json("--batch-size", "5", "--max-batches", "3")["deleted_property_object_cards"] == 2


def test_retention_days_option_moves_the_cutoff():
    overdue_objects(2)  # delisted 40 days ago

    assert purge_json("--retention-days", "41")["deleted_property_object_cards"] == 0
    assert purge_json("--retention-days", "39")["deleted_property_object_cards"] == 2


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--retention-days", "0"], "--retention-days / DELISTED_RETENTION_PERIOD_DAYS"),
        (["--batch-size", "0"], "--batch-size / DELISTED_RETENTION_BATCH_SIZE"),
        (["--batch-size", "10001"], "--batch-size / DELISTED_RETENTION_BATCH_SIZE"),
        (["--max-batches", "-1"], "--max-batches / DELISTED_RETENTION_MAX_BATCHES_PER_RUN"),
        (["--max-duration-seconds", "0"], "--max-duration-seconds / DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS"),
        (["--batch-pause-ms", "-5"], "--batch-pause-ms / DELISTED_RETENTION_BATCH_PAUSE_MS"),
    ],
)
def test_invalid_option_is_exit_2_naming_it_and_deletes_nothing(args, named):
    overdue_objects(2)

    with pytest.raises(CommandError, match=named) as error:
        call_command("purge_delisted", *args, stdout=StringIO())

    assert error.value.returncode == 2
    assert PropertyObjectCard.objects.count() == 2


def test_invalid_setting_is_exit_2_naming_it(settings):
    settings.DELISTED_RETENTION_MAX_BATCHES_PER_RUN = 0

    with pytest.raises(CommandError, match="DELISTED_RETENTION_MAX_BATCHES_PER_RUN") as error:
        call_command("purge_delisted", stdout=StringIO())

    assert error.value.returncode == 2


def test_second_run_while_the_lock_is_held_skips_with_exit_0(caplog):
    overdue_objects(2)
    with job_lock_held_elsewhere():
        result = purge_json()

    assert result["stop_reason"] == "lock_busy" and result["deleted_property_object_cards"] == 0
    assert result["has_more"] is None  # never checked: a skipped run does not claim there is nothing left
    assert PropertyObjectCard.objects.count() == 2
    assert any(r.levelname == "WARNING" and "lock" in r.getMessage() for r in caplog.records)


def test_dry_run_option_deletes_nothing():
    overdue_objects(2)

    result = purge_json("--dry-run")

    assert result["dry_run"] is True and result["would_delete_property_object_cards"] == 2
    assert not any(key.startswith("deleted_") for key in result)  # a dry run deleted nothing
    assert PropertyObjectCard.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_exit_status_is_2_for_bad_options_and_1_for_a_failed_batch():
    overdue_objects(2)
    bad = run_manage("purge_delisted", "--max-batches", "0")
    assert bad.returncode == 2 and "DELISTED_RETENTION_MAX_BATCHES_PER_RUN" in bad.stderr and bad.stdout == ""

    with deletes_refused(error="disk on fire", sqlstate="53100"):
        failed = run_manage("purge_delisted", "--json")

    assert failed.returncode == 1, failed.stderr
    result = json.loads(failed.stdout)  # the result of the failed run, and nothing else
    assert (result["stop_reason"], result["outcome"], result["batches_processed"]) == ("failed", "failed", 0)
    assert "batch failed run_id=" in failed.stderr and "disk on fire" in failed.stderr
    assert failed.stderr.strip().splitlines()[-1].split(" ", 3)[3].startswith("purge_delisted: error: disk on fire")
    assert PropertyObjectCard.objects.count() == 2


@pytest.mark.django_db(transaction=True)
def test_two_processes_started_together_delete_every_overdue_card_exactly_once():
    overdue_objects(400)

    runs = [
        subprocess.Popen(
            manage_command("purge_delisted", "--json", "--batch-size", "10"),
            env=manage_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT,
        )
        for _ in range(2)
    ]
    results = []
    for run in runs:
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 0, stderr
        results.append(json.loads(stdout))

    assert sum(r["deleted_property_object_cards"] for r in results) == 400
    assert {r["stop_reason"] for r in results} <= {"completed", "lock_busy"}
    assert "completed" in {r["stop_reason"] for r in results}
    assert not PropertyObjectCard.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_sigterm_stops_between_batches_keeping_committed_ones_and_the_next_run_finishes():
    overdue_objects(60)
    run = subprocess.Popen(
        manage_command("purge_delisted", "--json", "--batch-size", "5", "--batch-pause-ms", "200"),
        env=manage_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=PROJECT_ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while PropertyObjectCard.objects.count() == 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        stdout, stderr = run.communicate(timeout=30)
    finally:
        run.kill()

    assert run.returncode == 0, stderr
    result = json.loads(stdout)
    assert result["stop_reason"] == "stopped" and result["has_more"] is True
    assert 0 < result["deleted_property_object_cards"] < 60
    assert PropertyObjectCard.objects.count() == 60 - result["deleted_property_object_cards"]

    assert purge_json()["stop_reason"] == "completed"
    assert not PropertyObjectCard.objects.exists()

"""LOG_FORMAT=json: every log line of a run is one JSON object carrying the run's run_id."""

import json

import pytest

from tests.conftest import run_manage
from tests.factories import PropertyObjectCardFactory
from tests.servers import free_loopback_port


@pytest.mark.django_db(transaction=True)
def test_every_json_log_record_of_a_run_carries_its_run_id():
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)

    completed = run_manage(
        "purge_delisted", "--json", "--batch-size", "2",
        LOG_FORMAT="json", LOG_LEVEL="DEBUG",
        # A dead Pushgateway, so the metrics warnings are among the records.
        PROMETHEUS_PUSHGATEWAY_URL=f"http://127.0.0.1:{free_loopback_port()}",
    )

    assert completed.returncode == 0, completed.stderr
    run_id = json.loads(completed.stdout)["run_id"]
    records = [json.loads(line) for line in completed.stderr.splitlines()]
    assert {record["level"] for record in records} == {"DEBUG", "INFO", "WARNING"}
    assert all(record["run_id"] == run_id for record in records)
    completed_record = next(record for record in records if record["message"].startswith("purge completed"))
    assert completed_record["deleted_property_object_cards"] == 3  # structured fields, not only the message


@pytest.mark.django_db
def test_text_logs_are_the_default():
    completed = run_manage("purge_delisted")

    assert completed.returncode == 0
    assert " INFO retention.service purge started run_id=" in completed.stderr
    assert not completed.stderr.startswith("{")

"""The command line says exactly what it takes: an empty `--database` is refused, not read as the default; with
LOG_FORMAT=json every stderr line is JSON, start-up configuration errors included; `--help` gives each option's
accepted range, 0 = off where 0 switches a feature off."""

import json

import pytest

from catalog.models import PropertyObjectCard
from tests.factories import PropertyObjectCardFactory
from tests.support import run_manage

# The job runs in another process: its rows must be committed.
pytestmark = pytest.mark.django_db(transaction=True)

BAD_SETTINGS = {
    "LOG_LEVEL": "loud",
    "DELISTED_RETENTION_BATCH_SIZE": "ten",
    "DATABASE_URL": "not a url",
}


@pytest.mark.parametrize("arguments", [("--database", ""), ("--database=",)], ids=["separate", "joined"])
def test_an_empty_database_alias_is_refused_and_deletes_nothing(arguments):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)

    run = run_manage("purge_delisted", *arguments)

    assert run.returncode == 2, run.stderr
    assert "--database: no database alias ''" in run.stderr
    assert PropertyObjectCard.objects.count() == 3


@pytest.mark.parametrize("name", BAD_SETTINGS)
def test_a_configuration_error_is_one_json_line_with_log_format_json(name):
    run = run_manage("purge_delisted", LOG_FORMAT="json", **{name: BAD_SETTINGS[name]})

    assert run.returncode == 2, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["level"] == "ERROR" and record["message"].startswith("configuration error: ")
    assert name in record["message"]


@pytest.mark.parametrize("option", ["--batch-pause-ms", "--batch-pause-factor", "--max-replica-lag-seconds"])
def test_help_says_0_is_accepted_where_0_means_off(option):
    run = run_manage("purge_delisted", "--help")

    assert run.returncode == 0, run.stderr
    help_text = " ".join(run.stdout.split())
    described = help_text.split(f" {option} N ", 1)[1].split("(default:", 1)[0]
    assert " 0.." in f" {described}" and "0 = off" in described, described

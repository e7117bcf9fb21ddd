"""`purge_delisted --last-run`: the last run as the metrics sink holds it, read by the code the admin page reads it
with (retention.last_run), and the backlog now with the nights it needs; in text and in one JSON object. It runs
nothing."""

import json
from io import StringIO

import pytest
from django.core.management import call_command

from catalog.models import CardStatus, PropertyObjectCard
from retention.last_run import OUTCOME_WORDING, read_last_run
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory
from tests.support import free_loopback_port

pytestmark = pytest.mark.django_db


def overdue_objects(count: int) -> None:
    project = ProjectCardFactory()
    PropertyObjectCardFactory.create_batch(count, long_delisted=True, project_id=project.id)


def purge_delisted(*args: str) -> str:
    out = StringIO()
    call_command("purge_delisted", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def textfile(settings, tmp_path):
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = str(tmp_path / "catalog_delisted_retention.prom")


def test_last_run_json_is_the_run_the_sink_holds_and_the_backlog_it_left(textfile):
    overdue_objects(5)
    run = json.loads(purge_delisted("--json", "--batch-size", "2", "--max-batches", "1"))

    shown = json.loads(purge_delisted("--last-run", "--json", "--batch-size", "2", "--max-batches", "1"))

    last = shown["last_run"]
    assert (last["run_id"], last["outcome"], last["batches"]) == (run["run_id"], "has_more", 1)
    assert (last["deleted_property_object_cards"], last["overdue_left"]) == (2, [3, 0])
    assert last["wording"] == OUTCOME_WORDING["has_more"] and last["last_success_at"] == last["ended_at"]
    assert shown["backlog"]["property_objects"]["overdue"] == 3 and shown["backlog"]["projects"]["overdue"] == 0
    assert shown["backlog"]["property_objects"]["days_past_due"] >= 14
    assert (shown["cards_per_night"], shown["nights_needed"]) == (2, 2)  # 3 overdue, 2 a night
    assert PropertyObjectCard.objects.count() == 3  # it ran nothing


def test_last_run_text_says_what_the_admin_page_says(textfile):
    overdue_objects(2)
    purge_delisted()

    text = purge_delisted("--last-run")

    lines = text.splitlines()
    assert lines[0].startswith("last run: ended ") and lines[0].endswith(OUTCOME_WORDING["completed"])
    assert "deleted 2 property objects, 0 projects and 0 display overrides in 1 batches" in lines[1]
    assert "property objects: 0 overdue of 0 Delisted" in text
    assert read_last_run().last_run.source in text  # the page's own reading names the same sink


def test_last_run_reads_the_pushgateway_as_the_page_does(settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    overdue_objects(1)
    run = json.loads(purge_delisted("--json"))

    shown = json.loads(purge_delisted("--last-run", "--json"))

    assert shown["last_run"]["run_id"] == run["run_id"] and shown["last_run"]["source"].startswith("Pushgateway")
    assert shown["last_run"] == json.loads(purge_delisted("--last-run", "--json"))["last_run"]


def test_without_a_run_recorded_it_says_so_and_why_and_still_counts_the_backlog(settings, textfile):
    settings.PROMETHEUS_PUSHGATEWAY_URL = f"http://127.0.0.1:{free_loopback_port()}"  # nothing listens there
    PropertyObjectCardFactory(status=CardStatus.DELISTED)

    shown = json.loads(purge_delisted("--last-run", "--json"))
    text = purge_delisted("--last-run")

    assert shown["last_run"] is None and len(shown["sinks"]) == 2
    assert [problem.split(":")[0] for problem in shown["sink_problems"]] == [shown["sinks"][1].split(":")[0]]
    counted = shown["backlog"]["property_objects"]
    assert (counted["delisted"], counted["overdue"], counted["days_past_due"], shown["nights_needed"]) == (1, 0, 0, 0)
    assert text.splitlines()[0] == f"last run: none recorded in {', '.join(shown['sinks'])}"
    assert text.splitlines()[1].startswith("  could not read Pushgateway")


def test_without_a_sink_it_names_the_settings_that_give_one(settings):
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = settings.PROMETHEUS_PUSHGATEWAY_URL = ""

    text = purge_delisted("--last-run")

    assert text.splitlines()[0] == (
        "last run: unknown, no metrics sink is set (DELISTED_RETENTION_METRICS_TEXTFILE, PROMETHEUS_PUSHGATEWAY_URL)"
    )

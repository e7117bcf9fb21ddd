"""`purge_delisted --last-run`: the last run as the metrics sink holds it, read by the code the admin page reads it
with (retention.last_run), and the backlog now with the nights it needs; in text and in one JSON object. It runs
nothing. In development it reads the checkout's own textfile, which `make demo`'s run wrote."""

import json
import re
import secrets
import shutil
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command

from catalog.models import CardStatus, PropertyObjectCard
from retention.last_run import read_last_run
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory
from tests.support import PROJECT_ROOT, free_loopback_port, manage_env, run_manage

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
    assert last["last_success_at"] == last["ended_at"]
    assert shown["backlog"]["property_objects"]["overdue"] == 3 and shown["backlog"]["projects"]["overdue"] == 0
    assert shown["backlog"]["property_objects"]["days_past_due"] >= 14
    assert (shown["cards_per_night"], shown["nights_needed"]) == (2, 2)  # 3 overdue, 2 a night
    assert PropertyObjectCard.objects.count() == 3  # it ran nothing


def test_last_run_text_says_its_outcome_when_it_ended_and_how_long_it_took(textfile):
    overdue_objects(2)
    purge_delisted()

    text = purge_delisted("--last-run")

    lines = text.splitlines()
    assert re.fullmatch(r"last run: completed, ended \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC after \d+\.\d{3} s", lines[0])
    assert "deleted 2 property objects, 0 projects and 0 display overrides in 1 batches" in lines[1]
    assert "property objects: 0 overdue of 0 Delisted" in text
    assert read_last_run()[0].source in text  # the page's own reading names the same sink


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


@pytest.mark.slow
def test_its_json_error_is_one_object_and_its_log_lines_carry_no_run_id():
    """--last-run runs nothing, so it has no run: neither its log lines nor its error object name one."""
    unreachable = f"postgres://postgres@127.0.0.1:{free_loopback_port()}/catalog"  # nothing listens there

    shown = run_manage("purge_delisted", "--last-run", "--json", DATABASE_URL=unreachable, LOG_FORMAT="json")

    assert shown.returncode == 1
    (error,) = [json.loads(line) for line in shown.stdout.splitlines()]
    assert list(error) == ["error"] and "database" in error["error"]
    records = [json.loads(line) for line in shown.stderr.splitlines()]
    assert [record["message"] for record in records] == [f"purge_delisted: error: {error['error']}"]
    assert not any("run_id" in record for record in records)


def checkout_copy(destination):
    """What manage.py needs of the checkout, so that BASE_DIR, and the development textfile in its .demo/, are the
    copy's: the suite leaves a developer's demo in the real checkout alone."""
    for name in ("manage.py", "pyproject.toml"):
        shutil.copy2(PROJECT_ROOT / name, destination / name)
    for package in ("config", "catalog", "retention"):
        shutil.copytree(PROJECT_ROOT / package, destination / package, ignore=shutil.ignore_patterns("__pycache__"))
    return destination


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_after_make_demo_the_readmes_last_run_shows_the_demos_run(tmp_path):
    """The README's promise: `make demo`'s run (no textfile set, its .demo/ made) and then `manage.py purge_delisted
    --last-run` meet in the development default, the checkout's .demo/catalog_delisted_retention.prom. Production has
    no default: its --last-run reads no sink."""
    overdue_objects(2)
    checkout = checkout_copy(tmp_path)
    (checkout / ".demo").mkdir()
    development = {name: value for name, value in manage_env(PROMETHEUS_PUSHGATEWAY_URL="").items()
                   if name not in ("DELISTED_RETENTION_METRICS_TEXTFILE", "APP_ENV")}

    def manage(*args, **env):
        return subprocess.run([sys.executable, str(checkout / "manage.py"), *args], env=development | env,
                              cwd=checkout, capture_output=True, text=True, timeout=60)

    run = manage("purge_delisted", "--json")
    shown = manage("purge_delisted", "--last-run")
    in_production = manage("purge_delisted", "--last-run", APP_ENV="production",
                           DJANGO_SECRET_KEY=secrets.token_urlsafe(50))

    assert [run.returncode, shown.returncode, in_production.returncode] == [0, 0, 0], (
        run.stderr, shown.stderr, in_production.stderr,
    )
    ran, textfile = json.loads(run.stdout), checkout / ".demo" / "catalog_delisted_retention.prom"
    assert textfile.exists() and ran["deleted_property_object_cards"] == 2
    assert shown.stdout.startswith("last run: completed, ended ")
    assert f"run_id {ran['run_id']}, trace_id " in shown.stdout
    assert f"; from textfile {textfile}\n" in shown.stdout
    assert in_production.stdout.splitlines()[0].startswith("last run: unknown, no metrics sink is set")

"""The metrics a run hands over, gauges of the last run and of the last success: to a real Pushgateway (read from
its /metrics) and to node-exporter textfiles."""

import json
import logging
import socket
import os
import time
import uuid
from datetime import timedelta
import urllib.request
from io import StringIO

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from catalog.models import CardStatus
from retention.metrics import (
    BACKLOG,
    LAST_LOCK_BUSY,
    LAST_RUN,
    LAST_RUN_BATCHES,
    LAST_RUN_DELETED_CARDS,
    LAST_RUN_DELETED_OVERRIDES,
    LAST_RUN_DURATION,
    LAST_RUN_INFO,
    LAST_RUN_OUTCOME,
    LAST_SUCCESS,
    MAX_RUN_DURATION,
    OLDEST_OVERDUE_AGE,
    Pushgateway,
    Reading,
    export_run,
)
from config.logging import RunLog
from retention.results import Outcome, PurgeResult, StopReason
from retention.session import StopRequest
from tests.support import Progress, deletes_refused, job_lock_held_elsewhere, purge, run_manage
from tests.factories import (
    BuildingDisplayOverrideFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.support import free_loopback_port

pytestmark = pytest.mark.django_db


def catalog_with_overdue_cards() -> None:
    """3 overdue property objects (2 overrides), 1 overdue project without objects (1 building override),
    1 young Delisted object and 1 Published one."""
    project = ProjectCardFactory()
    objects = PropertyObjectCardFactory.create_batch(3, long_delisted=True, project_id=project.id)
    PropertyObjectDisplayOverrideFactory.create_batch(2, property_object_id=objects[0].id)
    empty_project = ProjectCardFactory(long_delisted=True)
    BuildingDisplayOverrideFactory(project_id=empty_project.id)
    PropertyObjectCardFactory(project_id=project.id, status=CardStatus.DELISTED, updated_at=timezone.now())
    PropertyObjectCardFactory(project_id=project.id)


@pytest.fixture
def textfile(settings, tmp_path):
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = str(tmp_path / "catalog_delisted_retention.prom")
    return tmp_path / "catalog_delisted_retention.prom"


def scraped(url: str) -> Reading:
    """The job's group on the gateway at `url`, read as the admin page reads that sink."""
    return Pushgateway(url, django_settings.PROMETHEUS_PUSHGATEWAY_INSTANCE).read(timeout=5)


def read_textfile(path) -> Reading:
    return Reading.parse(path.read_text())


def read_textfiles(path) -> Reading:
    """The configured textfile and its siblings, as node-exporter's textfile collector reads the directory."""
    return Reading.parse("".join(sibling.read_text() for sibling in sorted(path.parent.glob("*.prom"))))


def test_a_run_pushes_its_metrics_to_the_pushgateway(settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    catalog_with_overdue_cards()

    before = time.time()
    result = purge(batch_size=2)

    pushed = scraped(pushgateway)
    assert pushed.value(LAST_RUN_DELETED_CARDS, kind="property_object") == 3
    assert pushed.value(LAST_RUN_DELETED_CARDS, kind="project") == 1
    assert pushed.value(LAST_RUN_DELETED_OVERRIDES) == 3
    assert pushed.value(LAST_RUN_BATCHES) == 3
    assert {outcome: pushed.value(LAST_RUN_OUTCOME, outcome=outcome) for outcome in Outcome} == {
        "completed": 1, "has_more": 0, "stopped": 0, "failed": 0, "lock_busy": None,
    }
    assert before <= pushed.value(LAST_SUCCESS) == pushed.value(LAST_RUN) <= time.time()
    assert pushed.value(LAST_RUN_DURATION) == pytest.approx(result.duration_seconds)
    assert pushed.value(MAX_RUN_DURATION) == 1200
    assert pushed.value(LAST_RUN_INFO, run_id=str(result.run_id), trace_id="") == 1
    assert pushed.value(LAST_LOCK_BUSY) is None
    # Measured at the end of the run: only the young Delisted object is left.
    assert pushed.value(BACKLOG, kind="property_object", scope="delisted") == 1
    assert pushed.value(BACKLOG, kind="property_object", scope="overdue") == 0
    assert pushed.value(BACKLOG, kind="project", scope="delisted") == 0


def test_each_run_replaces_the_last_runs_gauges_and_adds_nothing_up(settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    catalog_with_overdue_cards()
    purge()
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    purge()

    pushed = scraped(pushgateway)
    assert pushed.value(LAST_RUN_DELETED_CARDS, kind="property_object") == 2
    assert pushed.value(LAST_RUN_DELETED_CARDS, kind="project") == 0
    assert pushed.value(LAST_RUN_BATCHES) == 1


def test_the_trace_id_of_the_last_run_is_carried_beside_its_run_id(textfile):
    run_id = uuid.uuid4()
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    result = PurgeResult(run_id=run_id, cutoff=None, stop_reason=StopReason.COMPLETED, outcome=Outcome.COMPLETED,
                         has_more=False, trace_id=trace_id)

    export_run(result, None, max_duration=timedelta(minutes=20),
               log=RunLog(logging.getLogger("retention.metrics"), {"run_id": str(run_id)}))

    assert read_textfile(textfile).value(LAST_RUN_INFO, run_id=str(run_id), trace_id=trace_id) == 1


def test_a_failed_run_is_the_last_run_and_leaves_the_last_success_in_place(settings, pushgateway, textfile):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    purge()
    last_success = scraped(pushgateway).value(LAST_SUCCESS)
    PropertyObjectCardFactory.create_batch(3, long_delisted=True, title="deletable")
    PropertyObjectCardFactory(long_delisted=True, title="poison")

    with deletes_refused(when="OLD.title = 'poison'"):
        assert purge().outcome == "failed"

    for written in (scraped(pushgateway), read_textfiles(textfile)):
        assert written.value(LAST_RUN_OUTCOME, outcome="failed") == 1
        assert written.value(LAST_RUN_OUTCOME, outcome="completed") == 0
        assert written.value(LAST_RUN_DELETED_CARDS, kind="property_object") == 3  # its committed batches are final
        assert written.value(LAST_SUCCESS) == pytest.approx(last_success, abs=1)
        assert written.value(LAST_RUN) > written.value(LAST_SUCCESS)


def test_a_run_skipped_on_a_busy_lock_leaves_the_last_run_in_place(settings, pushgateway, textfile):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    purge()
    last_run = scraped(pushgateway).value(LAST_RUN)
    with job_lock_held_elsewhere():
        purge()

    for written in (scraped(pushgateway), read_textfiles(textfile)):
        assert written.value(LAST_LOCK_BUSY) > written.value(LAST_RUN) == pytest.approx(last_run, abs=1)
        assert written.value(LAST_RUN_OUTCOME, outcome="completed") == 1


def value_in_group(gateway: str, name: str, **labels: str) -> float | None:
    with urllib.request.urlopen(f"{gateway}/metrics", timeout=5) as response:
        families = text_string_to_metric_families(response.read().decode())
    samples = (sample for family in families for sample in family.samples)
    return next(
        (sample.value for sample in samples if sample.name == name and labels.items() <= sample.labels.items()), None
    )


def test_two_environments_sharing_a_pushgateway_keep_their_own_series(settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    staging, production = "staging", "db.example.com:5432/catalog"  # the default's form: a "/" in the value
    settings.PROMETHEUS_PUSHGATEWAY_INSTANCE = staging
    catalog_with_overdue_cards()
    purge()
    settings.PROMETHEUS_PUSHGATEWAY_INSTANCE = production

    purge()
    purge()

    assert value_in_group(pushgateway, LAST_RUN_DELETED_CARDS, instance=staging, kind="property_object") == 3
    assert value_in_group(pushgateway, LAST_RUN_DELETED_CARDS, instance=production, kind="property_object") == 0


@pytest.mark.parametrize("unset", [{}, {"PROMETHEUS_PUSHGATEWAY_INSTANCE": ""}], ids=["unset", "empty"])
def test_the_default_pushgateway_instance_is_the_database(unset):
    shown = run_manage(
        "shell", "--verbosity", "0", "-c",
        "from django.conf import settings; print(settings.PROMETHEUS_PUSHGATEWAY_INSTANCE)",
        DATABASE_URL="postgres://catalog@db-eu.example.com:6432/catalog_eu", **unset,
    )

    assert shown.stdout.strip() == "db-eu.example.com:6432/catalog_eu", shown.stderr


def test_a_dead_pushgateway_does_not_fail_the_purge(settings, textfile, caplog):
    dead_gateway = f"http://127.0.0.1:{free_loopback_port()}"
    settings.PROMETHEUS_PUSHGATEWAY_URL = dead_gateway
    catalog_with_overdue_cards()

    out = StringIO()
    call_command("purge_delisted", "--json", stdout=out)

    result = json.loads(out.getvalue())
    assert result["deleted_property_object_cards"] == 3 and result["stop_reason"] == "completed"
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and dead_gateway in getattr(r, "sink", "")]
    assert warnings and all(r.run_id == result["run_id"] for r in warnings)
    assert read_textfile(textfile).value(LAST_RUN_OUTCOME, outcome="completed") == 1  # the other sink got it


def test_the_textfile_parses_and_is_replaced_atomically(textfile):
    catalog_with_overdue_cards()
    purge()

    with open(textfile) as reader_of_the_first_run:  # like node-exporter in the middle of a scrape
        purge()

        # The path now names a new file; the open one is the first run's, whole, never written over.
        assert os.fstat(reader_of_the_first_run.fileno()).st_ino != os.stat(textfile).st_ino
        first = Reading.parse(reader_of_the_first_run.read())
    assert first.value(LAST_RUN_DELETED_CARDS, kind="property_object") == 3
    second = read_textfile(textfile)
    assert second.value(LAST_RUN_DELETED_CARDS, kind="property_object") == 0
    # One file a group, none of them a temp file left behind.
    assert sorted(path.name for path in textfile.parent.iterdir()) == [
        "catalog_delisted_retention.prom", "catalog_delisted_retention_backlog.prom",
        "catalog_delisted_retention_last_success.prom",
    ]


def test_the_backlog_is_exported_when_a_run_starts_and_when_it_ends(textfile):
    catalog_with_overdue_cards()
    overdue_during_the_run = []

    purge(progress=Progress(on_batch=lambda deleted: overdue_during_the_run.append(
        read_textfiles(textfile).value(BACKLOG, kind="property_object", scope="overdue")
    )))

    assert overdue_during_the_run[0] == 3
    assert read_textfiles(textfile).value(BACKLOG, kind="property_object", scope="overdue") == 0


def test_the_age_of_the_oldest_overdue_card_is_exported_with_the_backlog(textfile):
    catalog_with_overdue_cards()  # delisted 45 days ago: 15 days past a 30-day retention

    purge(batch_size=1, max_batches=1)

    left_behind = read_textfiles(textfile)
    fifteen_days = pytest.approx(timedelta(days=15).total_seconds(), abs=60)
    assert left_behind.value(OLDEST_OVERDUE_AGE, kind="property_object") == fifteen_days
    assert left_behind.value(OLDEST_OVERDUE_AGE, kind="project") == fifteen_days
    purge()
    drained = read_textfiles(textfile)
    assert drained.value(OLDEST_OVERDUE_AGE, kind="property_object") == 0
    assert drained.value(OLDEST_OVERDUE_AGE, kind="project") == 0


def stopped_already() -> StopRequest:
    stop = StopRequest()
    stop.request()
    return stop


@pytest.mark.parametrize(
    ("limits", "outcome", "counts_as_success"),
    [
        ({"stop": stopped_already()}, "stopped", False),
        ({"batch_size": 1, "max_batches": 1}, "has_more", True),
    ],
)
def test_stopped_and_has_more_runs_are_the_last_runs_outcome(textfile, limits, outcome, counts_as_success):
    catalog_with_overdue_cards()

    purge(**limits)

    written = read_textfiles(textfile)
    assert written.value(LAST_RUN_OUTCOME, outcome=outcome) == 1
    assert written.value(LAST_RUN_OUTCOME, outcome="completed") == 0
    assert (written.value(LAST_SUCCESS) is not None) == counts_as_success


def backlog_counts(queries) -> list[str]:
    """The backlog counts a run made: the statements counting the Delisted property objects, one chunk each on a
    small catalog (retention/sql/statements.sql, "backlog: property_object_cards, in chunks")."""
    return [q["sql"] for q in queries.captured_queries
            if "(SELECT updated_at FROM catalog.property_object_cards" in q["sql"]]


@pytest.mark.parametrize("sinks", ["none", "textfile and pushgateway"])
def test_a_run_counts_the_backlog_twice_whatever_reads_it(settings, tmp_path, pushgateway, sinks):
    """The start count feeds the result, the metrics and the progress bar; the end count has_more, the held-back
    projects and the metrics."""
    if sinks != "none":
        settings.DELISTED_RETENTION_METRICS_TEXTFILE = str(tmp_path / "catalog_delisted_retention.prom")
        settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    catalog_with_overdue_cards()
    totals = []

    with CaptureQueriesContext(connection) as queries:
        result = purge(batch_size=1, max_batches=2, progress=Progress(on_start=totals.append))

    assert len(backlog_counts(queries)) == 2
    assert totals == [4] and result.overdue_property_object_cards == 3 and result.has_more is True


def test_a_run_never_reads_the_textfile_so_garbage_in_it_is_simply_replaced(textfile, caplog):
    textfile.write_text("this is not an exposition {{{\n")

    purge()

    assert read_textfile(textfile).value(LAST_RUN_OUTCOME, outcome="completed") == 1
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_pushgateway_that_never_answers_costs_each_export_the_push_s_own_timeout(settings, monkeypatch, caplog):
    monkeypatch.setattr("retention.metrics.EXPORT_TIMEOUT_SECONDS", 1)
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        settings.PROMETHEUS_PUSHGATEWAY_URL = f"http://127.0.0.1:{silent.getsockname()[1]}"

        result = purge()

    assert result.stop_reason == "completed"
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and hasattr(r, "sink")]  # the exports' warnings
    assert len(warnings) == 2 and all("timed out" in r.getMessage() for r in warnings)  # at its start and end

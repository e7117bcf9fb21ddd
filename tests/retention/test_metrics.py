"""The metrics a run hands over: to a real Pushgateway (read back from its /metrics) and to a textfile."""

import json
import socket
import os
import time
from datetime import timedelta
import urllib.request
from io import StringIO

import psycopg
import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from catalog.models import CardStatus
from retention.locks import advisory_lock_key
from retention.metrics import (
    BACKLOG,
    BATCHES_PROCESSED,
    DELETED_OVERRIDES,
    DELETED_PROJECT_CARDS,
    DELETED_PROPERTY_OBJECT_CARDS,
    LAST_RUN,
    LAST_SUCCESS,
    LOCK_CONTENTION,
    MAX_RUN_DURATION,
    OLDEST_OVERDUE_AGE,
    RUN_DURATION,
    RUNS,
)
from retention.results import Outcome, PurgeFailed
from retention.service import LOCK_NAME
from retention.session import StopRequest
from tests.support import database_url_of_tests, deletes_refused, purge, run_manage
from tests.factories import (
    BuildingDisplayOverrideFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.support import Exposition, free_loopback_port

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


def read_textfile(path) -> Exposition:
    return Exposition(path.read_text())


def test_a_run_pushes_its_metrics_to_the_pushgateway(settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    catalog_with_overdue_cards()

    before = time.time()
    purge(batch_size=2)

    pushed = Exposition.scrape(pushgateway)
    assert pushed.value(DELETED_PROPERTY_OBJECT_CARDS) == 3
    assert pushed.value(DELETED_PROJECT_CARDS) == 1
    assert pushed.value(DELETED_OVERRIDES) == 3
    assert pushed.value(BATCHES_PROCESSED) == 3
    assert {outcome: pushed.value(RUNS, outcome=outcome) for outcome in Outcome} == {
        "completed": 1, "has_more": 0, "stopped": 0, "lock_busy": 0, "failed": 0,
    }
    assert before <= pushed.value(LAST_SUCCESS) <= time.time()
    assert pushed.value(f"{RUN_DURATION}_count") == 1
    assert pushed.value(MAX_RUN_DURATION) == 1200
    assert pushed.value(LOCK_CONTENTION) == 0
    # Measured at the end of the run: only the young Delisted object is left.
    assert pushed.value(BACKLOG, kind="property_object", scope="delisted") == 1
    assert pushed.value(BACKLOG, kind="property_object", scope="overdue") == 0
    assert pushed.value(BACKLOG, kind="project", scope="delisted") == 0


def test_counters_and_the_histogram_add_up_across_runs_in_the_pushgateway(settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    catalog_with_overdue_cards()
    purge()
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)

    purge()

    pushed = Exposition.scrape(pushgateway)
    assert pushed.value(DELETED_PROPERTY_OBJECT_CARDS) == 5
    assert pushed.value(DELETED_PROJECT_CARDS) == 1
    assert pushed.value(RUNS, outcome="completed") == 2
    assert pushed.value(f"{RUN_DURATION}_count") == 2
    assert pushed.value(f"{RUN_DURATION}_bucket", le="60") == 2  # the gateway writes le="60", not "60.0"
    assert pushed.value(BATCHES_PROCESSED) == 1  # a gauge: the latest run's


def test_a_failed_run_counts_as_failed_and_leaves_the_last_success_in_place(settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    purge()
    last_success = Exposition.scrape(pushgateway).value(LAST_SUCCESS)
    PropertyObjectCardFactory.create_batch(3, long_delisted=True, title="deletable")
    PropertyObjectCardFactory(long_delisted=True, title="poison")

    with deletes_refused(when="OLD.title = 'poison'"), pytest.raises(PurgeFailed):
        purge()

    pushed = Exposition.scrape(pushgateway)
    assert pushed.value(RUNS, outcome="failed") == 1
    assert pushed.value(DELETED_PROPERTY_OBJECT_CARDS) == 3  # what the failed run deleted is final
    assert pushed.value(RUNS, outcome="completed") == 1
    assert pushed.value(LAST_SUCCESS) == last_success
    assert pushed.value(f"{RUN_DURATION}_count") == 2


def test_a_run_skipped_on_a_busy_lock_counts_contention_and_is_no_success(settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    with psycopg.connect(database_url_of_tests(), autocommit=True) as other_instance:
        other_instance.execute("SELECT pg_advisory_lock(%s)", [advisory_lock_key(LOCK_NAME)])

        purge()

    pushed = Exposition.scrape(pushgateway)
    assert pushed.value(RUNS, outcome="lock_busy") == 1
    assert pushed.value(LOCK_CONTENTION) == 1
    assert pushed.value(LAST_SUCCESS) is None
    assert pushed.value(f"{RUN_DURATION}_count") == 0


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

    assert value_in_group(pushgateway, RUNS, instance=staging, outcome="completed") == 1
    assert value_in_group(pushgateway, DELETED_PROPERTY_OBJECT_CARDS, instance=staging) == 3
    assert value_in_group(pushgateway, RUNS, instance=production, outcome="completed") == 2
    assert value_in_group(pushgateway, DELETED_PROPERTY_OBJECT_CARDS, instance=production) == 0


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
    assert read_textfile(textfile).value(RUNS, outcome="completed") == 1  # the other sink still got it


def test_the_textfile_parses_and_is_replaced_atomically(textfile):
    catalog_with_overdue_cards()
    purge()

    with open(textfile) as reader_of_the_first_run:  # like node-exporter in the middle of a scrape
        purge()

        # The path now names a new file; the open one is the first run's, whole, never written over.
        assert os.fstat(reader_of_the_first_run.fileno()).st_ino != os.stat(textfile).st_ino
        first = Exposition(reader_of_the_first_run.read())
    assert first.value(RUNS, outcome="completed") == 1 and first.value(DELETED_PROPERTY_OBJECT_CARDS) == 3
    second = read_textfile(textfile)
    assert second.value(RUNS, outcome="completed") == 2 and second.value(DELETED_PROPERTY_OBJECT_CARDS) == 3
    assert [path.name for path in textfile.parent.iterdir()] == [textfile.name]  # no temp file left behind


def test_the_backlog_is_exported_when_a_run_starts_and_when_it_ends(textfile):
    catalog_with_overdue_cards()
    overdue_during_the_run = []

    purge(on_batch=lambda deleted: overdue_during_the_run.append(
        read_textfile(textfile).value(BACKLOG, kind="property_object", scope="overdue")
    ))

    assert overdue_during_the_run[0] == 3
    assert read_textfile(textfile).value(BACKLOG, kind="property_object", scope="overdue") == 0


def test_the_age_of_the_oldest_overdue_card_is_exported_with_the_backlog(textfile):
    catalog_with_overdue_cards()  # delisted 45 days ago: 15 days past a 30-day retention

    purge(batch_size=1, max_batches=1)

    left_behind = read_textfile(textfile)
    fifteen_days = pytest.approx(timedelta(days=15).total_seconds(), abs=60)
    assert left_behind.value(OLDEST_OVERDUE_AGE, kind="property_object") == fifteen_days
    assert left_behind.value(OLDEST_OVERDUE_AGE, kind="project") == fifteen_days
    purge()
    drained = read_textfile(textfile)
    assert drained.value(OLDEST_OVERDUE_AGE, kind="property_object") == 0
    assert drained.value(OLDEST_OVERDUE_AGE, kind="project") == 0


def test_the_last_run_is_one_series_labelled_with_its_outcome(textfile):
    purge()
    before = time.time()
    with psycopg.connect(database_url_of_tests(), autocommit=True) as other_instance:
        other_instance.execute("SELECT pg_advisory_lock(%s)", [advisory_lock_key(LOCK_NAME)])
        purge()

    written = read_textfile(textfile)
    assert before <= written.value(LAST_RUN, outcome="lock_busy") <= time.time()
    assert [name for name, _ in written.values if name == LAST_RUN] == [LAST_RUN]  # the completed run's is gone


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
def test_stopped_and_has_more_runs_are_counted_by_outcome(textfile, limits, outcome, counts_as_success):
    catalog_with_overdue_cards()

    purge(**limits)

    written = read_textfile(textfile)
    assert written.value(RUNS, outcome=outcome) == 1
    assert written.value(RUNS, outcome="completed") == 0
    assert (written.value(LAST_SUCCESS) is not None) == counts_as_success


def backlog_counts(queries) -> list[str]:
    """The backlog counts a run made: the statements counting the Delisted property objects, one chunk each on a
    small catalog (retention.backlog.delisted_statement)."""
    return [q["sql"] for q in queries.captured_queries
            if "SELECT id, updated_at FROM catalog.property_object_cards" in q["sql"]]


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
        result = purge(batch_size=1, max_batches=2, on_start=lambda backlog: totals.append(backlog.overdue_cards))

    assert len(backlog_counts(queries)) == 2
    assert totals == [4] and result.overdue_property_object_cards == 3 and result.has_more is True


def test_a_corrupt_textfile_is_rewritten_whole_with_a_warning(textfile, caplog):
    textfile.write_text("this is not an exposition {{{\n")

    purge()

    assert read_textfile(textfile).value(RUNS, outcome="completed") == 1
    assert any("rewritten whole" in r.getMessage() for r in caplog.records if r.levelname == "WARNING")


def test_a_pushgateway_that_never_answers_costs_one_bounded_export(settings, monkeypatch, caplog):
    monkeypatch.setattr("retention.metrics.EXPORT_TIMEOUT_SECONDS", 1)
    with socket.socket() as silent:  # accepts connections (the kernel's backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        settings.PROMETHEUS_PUSHGATEWAY_URL = f"http://127.0.0.1:{silent.getsockname()[1]}"

        result = purge()

    assert result.stop_reason == "completed"
    warnings = [r for r in caplog.records if r.levelname == "WARNING" and hasattr(r, "sink")]  # the exports' warnings
    assert warnings and all(r.timeout_seconds == 1 or "took its whole" in r.getMessage() for r in warnings)

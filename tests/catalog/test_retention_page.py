"""The "Delisted retention" admin page: right counts for staff, nobody else, a fixed number of queries, and the
last run as the job's metrics sink holds it."""

import re
from datetime import timedelta

import pytest
import yaml
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from catalog.admin.retention_page import OUTCOME_WORDING, OVERDUE_AGE_GOAL
from catalog.models import CardStatus
from config.statements import NAME_OF_STATEMENT
from retention.metrics import LAST_RUN, LAST_RUN_INFO, LAST_RUN_OUTCOME, RUN_OUTCOMES
from tests.support import job_lock_held_elsewhere, purge
from tests.factories import (
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.support import PROJECT_ROOT, free_loopback_port

pytestmark = pytest.mark.django_db

PAGE = reverse("admin:catalog_delistedretention_changelist")


def catalog(scale: int = 1) -> None:
    """Per unit of scale: a Delisted project whose 2 objects are overdue too (held back until they go), an
    overdue project with no objects, a young Delisted object with an override, and a Published object."""
    for _ in range(scale):
        held_back = ProjectCardFactory(long_delisted=True)
        PropertyObjectCardFactory.create_batch(2, long_delisted=True, project_id=held_back.id)
        ProjectCardFactory(long_delisted=True)
        young = PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now())
        PropertyObjectDisplayOverrideFactory(property_object_id=young.id)
        PropertyObjectCardFactory()


@pytest.fixture
def plain_staff_client(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("oncall", is_staff=True))
    return client


def test_staff_sees_the_backlog_the_limits_and_the_preview(plain_staff_client, settings):
    settings.DELISTED_RETENTION_BATCH_SIZE = 1
    settings.DELISTED_RETENTION_MAX_BATCHES_PER_RUN = 3
    catalog()

    response = plain_staff_client.get(PAGE)

    assert response.status_code == 200
    backlog = response.context["backlog"]
    assert (backlog.property_objects.delisted, backlog.property_objects.overdue) == (3, 2)
    assert (backlog.projects.delisted, backlog.projects.overdue) == (2, 2)
    assert backlog.property_objects.oldest_delisted_at < timezone.now() - timedelta(days=30)
    assert response.context["projects_held_back"] == 1
    assert response.context["cards_per_run"] == 3
    assert response.context["nightly_runs_needed"] == 2  # 4 overdue cards, 3 per run
    preview = response.context["preview"]
    assert (preview["deleted_property_object_cards"], preview["deleted_project_cards"]) == (2, 1)
    assert (preview["batches_processed"], preview["has_more"]) == (3, True)
    assert (response.context["preview_held_back"], response.context["preview_held_back_exact"]) == (0, True)
    html = response.content.decode()
    held_back = '<strong class="held-back">1</strong> project overdue still has property-object cards'
    assert held_back in " ".join(html.split())
    assert "<th>Batch size</th><td><code>DELISTED_RETENTION_BATCH_SIZE</code></td><td>1 </td>" in html


def test_the_page_says_how_many_days_the_oldest_overdue_card_is_past_due_and_warns_past_the_goal(plain_staff_client):
    PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now() - timedelta(days=42, hours=12))
    ProjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now())

    html = plain_staff_client.get(PAGE).content.decode()

    # 42.5 days since delisting, 30 of them the retention period: 12.5 past due, past the goal of 3.
    assert re.search(
        r'id="backlog-property-objects">(?:(?!</tr>).)*<td class="days-past-due past-goal">12.5</td>', html, re.S
    )
    assert re.search(r'id="backlog-projects">(?:(?!</tr>).)*<td class="days-past-due">none overdue</td>', html, re.S)
    warning = " ".join(re.search(r'<p class="errornote" id="overdue-warning">(.*?)</p>', html, re.S)[1].split())
    assert warning.startswith(
        "The oldest overdue property object has waited 12.5 days past its deletion date, longer than the goal of 3 days"
    )


def test_no_warning_while_the_oldest_overdue_card_is_within_the_goal(plain_staff_client):
    PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now() - timedelta(days=32, hours=12))
    # An overdue project far past the goal is held back by its objects by design: no warning for it, as no alert.
    project = ProjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now() - timedelta(days=300))
    PropertyObjectCardFactory(project_id=project.id)

    html = plain_staff_client.get(PAGE).content.decode()

    assert re.search(r'id="backlog-property-objects">(?:(?!</tr>).)*<td class="days-past-due">2.5</td>', html, re.S)
    assert 'id="overdue-warning"' not in html


def test_the_goal_is_the_one_the_alert_fires_past():
    rules_file = PROJECT_ROOT / "deploy" / "prometheus" / "catalog-delisted-retention.rules.yml"
    rules = yaml.safe_load(rules_file.read_text())
    recorded = {
        rule["record"]: rule["expr"] for group in rules["groups"] for rule in group["rules"] if "record" in rule
    }

    assert recorded["catalog_delisted_retention:overdue_age_slo_days"] == f"vector({OVERDUE_AGE_GOAL.days})"


def test_counts_have_thousands_separators(plain_staff_client, settings):
    settings.DELISTED_RETENTION_BATCH_SIZE = 2000
    settings.DELISTED_RETENTION_MAX_BATCHES_PER_RUN = 100

    html = plain_staff_client.get(PAGE).content.decode()

    assert "It deletes up to 200,000 cards a night" in " ".join(html.split())


def test_the_held_back_wording_names_the_projects_that_stay_held_back(plain_staff_client):
    catalog()
    blocked = ProjectCardFactory(long_delisted=True)
    PropertyObjectCardFactory(project_id=blocked.id)  # Published: keeps its project after phase A too

    response = plain_staff_client.get(PAGE)

    context = response.context
    assert (context["projects_held_back"], context["held_back_after_overdue_objects"]) == (2, 1)
    wording = " ".join(re.search(r'<p id="held-back">(.*?)</p>', response.content.decode(), re.S)[1].split())
    wording = re.sub(r"<[^>]+>", "", wording)
    assert "2 projects overdue still have property-object cards and wait." in wording
    assert "Of them, 1 has a card that is not overdue" in wording
    assert "and stays until that card goes too" in wording


def test_the_page_is_listed_in_the_admin_index(plain_staff_client):
    response = plain_staff_client.get(reverse("admin:index"))

    assert f'href="{PAGE}"' in response.content.decode() and "Delisted retention" in response.content.decode()


def test_the_address_it_had_before_it_moved_to_the_catalog_redirects_to_it(plain_staff_client):
    response = plain_staff_client.get("/admin/retention/delistedretention/")

    assert response.status_code == 301 and response["Location"] == PAGE == "/admin/catalog/delistedretention/"


def test_anonymous_users_are_sent_to_the_login_page(client):
    response = client.get(PAGE)

    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))


def test_users_who_are_not_staff_are_refused(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("visitor"))

    response = client.get(PAGE)

    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))


def test_the_page_offers_no_change_view_of_the_proxied_cards(plain_staff_client):
    project = ProjectCardFactory(long_delisted=True)

    response = plain_staff_client.get(f"{PAGE}{project.id}/change/")

    assert response.status_code == 404


def test_query_count_does_not_grow_with_the_data(plain_staff_client):
    catalog(scale=1)
    with CaptureQueriesContext(connection) as small:
        plain_staff_client.get(PAGE)
    catalog(scale=20)

    with CaptureQueriesContext(connection) as large:
        response = plain_staff_client.get(PAGE)

    assert response.context["backlog"].property_objects.delisted == 63
    assert len(large) == len(small)


def test_the_page_runs_no_dry_run_of_its_own(plain_staff_client):
    catalog(scale=3)

    with CaptureQueriesContext(connection) as queries:
        plain_staff_client.get(PAGE)

    assert not any("property_object_display_overrides" in query["sql"] for query in queries)
    # The chart's next days and the cards after them (every card within the window); the overdue cards of each kind;
    # the projects held back now and after the overdue objects.
    assert sum("count(" in query["sql"].lower() for query in queries) == 4


def test_the_page_reads_in_one_transaction_one_statement_each(plain_staff_client):
    """PageReads: one transaction, no BEGIN and COMMIT a read (docs/benchmark-findings.md, "The admin page at 1M
    cards, again": 10 round trips instead of 22)."""
    sent = []

    def record(execute, sql, params, many, context):
        sent.append(NAME_OF_STATEMENT.get(sql, sql.split()[0]))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        plain_staff_client.get(PAGE)

    # The test's own transaction makes the page's a savepoint.
    assert sent[sent.index("SAVEPOINT"):] == [
        "SAVEPOINT", "page reads in one process", "cutoff", "becoming deletable",
        "backlog: property_object_cards, whole", "backlog: project_cards, whole", "held back now and after", "RELEASE",
    ]


def test_every_outcome_the_job_records_has_the_pages_words():
    assert set(OUTCOME_WORDING) == set(RUN_OUTCOMES)


def test_the_last_run_comes_from_the_metrics_textfile(plain_staff_client, settings, tmp_path):
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = str(tmp_path / "catalog_delisted_retention.prom")
    catalog()
    purge()
    result = purge(batch_size=1, max_batches=1)  # nothing overdue left: completed again, no batch

    response = plain_staff_client.get(PAGE)

    last_run = response.context["last_run"]
    assert (last_run.outcome, last_run.batches, last_run.overdue_left[0]) == ("completed", 0, 0)
    assert last_run.deleted_property_object_cards == 0 and last_run.run_id == str(result.run_id)
    assert timezone.now() - last_run.ended_at < timedelta(minutes=1)
    html = response.content.decode()
    assert '<td class="outcome">Finished: every overdue card is gone</td>' in html
    assert 'class="trace-id"' not in html  # tracing was off


def test_the_last_run_shows_its_trace_id_when_the_sink_has_it(plain_staff_client, settings, tmp_path):
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = str(tmp_path / "catalog_delisted_retention.prom")
    (tmp_path / "catalog_delisted_retention.prom").write_text(
        f'{LAST_RUN} 1.7e9\n{LAST_RUN_OUTCOME}{{outcome="completed"}} 1\n'
        f'{LAST_RUN_INFO}{{run_id="9c1e",trace_id="4bf92f3577b34da6a3ce929d0e0e4736"}} 1\n'
    )

    html = plain_staff_client.get(PAGE).content.decode()

    assert '<td class="trace-id"><code>4bf92f3577b34da6a3ce929d0e0e4736</code>' in html


def test_the_last_run_comes_from_the_pushgateway_when_that_is_the_sink(plain_staff_client, settings, pushgateway):
    settings.PROMETHEUS_PUSHGATEWAY_URL = pushgateway
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = ""
    catalog()
    purge(batch_size=1, max_batches=1)

    last_run = plain_staff_client.get(PAGE).context["last_run"]

    assert last_run.source.startswith(f"Pushgateway {pushgateway} (instance ")  # this environment's group
    assert (last_run.outcome, last_run.batches) == ("has_more", 1)
    assert last_run.overdue_left[0] == 1


def test_a_skip_on_a_busy_lock_is_shown_after_the_last_run(plain_staff_client, settings, tmp_path):
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = str(tmp_path / "catalog_delisted_retention.prom")
    catalog()
    purge()
    with job_lock_held_elsewhere():
        purge()

    response = plain_staff_client.get(PAGE)

    last_run = response.context["last_run"]
    assert (last_run.outcome, last_run.deleted_property_object_cards) == ("completed", 2)
    assert last_run.last_success_at is not None and last_run.skipped_at > last_run.ended_at
    assert "a run did not start because another one was still going" in response.content.decode()


def test_an_unreachable_pushgateway_is_said_on_the_page(plain_staff_client, settings):
    settings.PROMETHEUS_PUSHGATEWAY_URL = f"http://127.0.0.1:{free_loopback_port()}"

    response = plain_staff_client.get(PAGE)

    assert response.status_code == 200 and response.context.get("last_run") is None
    html = " ".join(response.content.decode().split())
    assert "No run is known to this page yet: none recorded so far, and the metrics could not be read" in html
    assert f"No run recorded in Pushgateway {settings.PROMETHEUS_PUSHGATEWAY_URL} (instance " in html
    assert "). Unreadable:" in html


def test_without_a_metrics_sink_the_page_says_the_last_run_is_not_known_here(plain_staff_client, settings):
    settings.PROMETHEUS_PUSHGATEWAY_URL = ""
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = ""

    html = " ".join(plain_staff_client.get(PAGE).content.decode().split())

    assert "No run is known to this page yet: an operator has not connected it to the job's metrics" in html
    assert "The job's metrics go nowhere this page can read" in html


def test_invalid_settings_are_shown_instead_of_a_preview(plain_staff_client, settings):
    settings.DELISTED_RETENTION_BATCH_SIZE = 0

    response = plain_staff_client.get(PAGE)

    assert response.status_code == 200
    assert "DELISTED_RETENTION_BATCH_SIZE: batch size must be between 1 and 10000, got 0" in response.content.decode()

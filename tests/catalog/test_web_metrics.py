"""The web app's /metrics (django-prometheus) reports catalog_delisted_backlog live, cached against scrapes."""

import pytest
from django.apps import apps
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry

from catalog.models import CardStatus
from catalog.metrics import BACKLOG_CACHE_SECONDS, BacklogCollector
from retention.metrics import BACKLOG, OLDEST_OVERDUE_AGE, Reading
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

pytestmark = pytest.mark.django_db


class HandDrivenClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def backlog_collector():
    """The app's collector swapped for a fresh one on a hand-driven clock: no cache from earlier tests."""
    app_collector = apps.get_app_config("catalog").backlog_collector
    collector = BacklogCollector(clock=HandDrivenClock())
    REGISTRY.unregister(app_collector)
    REGISTRY.register(collector)
    yield collector
    REGISTRY.unregister(collector)
    REGISTRY.register(app_collector)


def scrape(client) -> Reading:
    response = client.get("/metrics")
    assert response.status_code == 200
    return Reading.parse(response.content.decode())


def test_metrics_endpoint_shows_the_live_backlog(client, backlog_collector):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now())
    ProjectCardFactory(long_delisted=True)

    metrics = scrape(client)

    assert metrics.value(BACKLOG, kind="property_object", scope="delisted") == 4
    assert metrics.value(BACKLOG, kind="property_object", scope="overdue") == 3
    assert metrics.value(BACKLOG, kind="project", scope="delisted") == 1
    assert metrics.value(BACKLOG, kind="project", scope="overdue") == 1


def test_metrics_endpoint_shows_how_long_the_oldest_overdue_card_is_past_the_cutoff(client, backlog_collector):
    PropertyObjectCardFactory(long_delisted=True)  # 45 days ago: 15 days past a 30-day retention
    ProjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now())

    metrics = scrape(client)

    assert metrics.value(OLDEST_OVERDUE_AGE, kind="property_object") == pytest.approx(15 * 86400, abs=60)
    assert metrics.value(OLDEST_OVERDUE_AGE, kind="project") == 0


def test_scrapes_within_the_cache_period_do_not_query_the_database(client, backlog_collector):
    PropertyObjectCardFactory(long_delisted=True)
    scrape(client)
    PropertyObjectCardFactory(long_delisted=True)
    backlog_collector.clock.now += BACKLOG_CACHE_SECONDS - 1

    with CaptureQueriesContext(connection) as queries:
        cached = scrape(client)

    assert len(queries) == 0
    assert cached.value(BACKLOG, kind="property_object", scope="overdue") == 1
    backlog_collector.clock.now += 1
    assert scrape(client).value(BACKLOG, kind="property_object", scope="overdue") == 2


def test_registering_the_collector_queries_nothing():
    with CaptureQueriesContext(connection) as queries:
        CollectorRegistry(auto_describe=True).register(BacklogCollector())

    assert len(queries) == 0


def test_a_failing_measurement_drops_the_series_without_failing_the_scrape(client, backlog_collector, settings):
    settings.DELISTED_RETENTION_PERIOD_DAYS = 10**9  # too large for a timedelta

    assert scrape(client).value(BACKLOG, kind="property_object", scope="delisted") is None

"""The "Delisted retention" admin page: right counts for staff, nobody else, a fixed number of queries."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from catalog.models import CardStatus
from tests.factories import (
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)

pytestmark = pytest.mark.django_db

PAGE = reverse("admin:retention_delistedretention_changelist")


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
    client.force_login(django_user_model.objects.create_user("oncall", password="pw", is_staff=True))
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
    assert preview.dry_run and (preview.deleted_property_object_cards, preview.deleted_project_cards) == (2, 1)
    assert preview.has_more
    html = response.content.decode()
    assert '<td class="held-back">1</td>' in html
    assert "<code>DELISTED_RETENTION_BATCH_SIZE</code></td><td>1 </td>" in html


def test_the_page_is_listed_in_the_admin_index(plain_staff_client):
    response = plain_staff_client.get(reverse("admin:index"))

    assert f'href="{PAGE}"' in response.content.decode() and "Delisted retention" in response.content.decode()


def test_anonymous_users_are_sent_to_the_login_page(client):
    response = client.get(PAGE)

    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))


def test_users_who_are_not_staff_are_refused(client, django_user_model):
    client.force_login(django_user_model.objects.create_user("visitor", password="pw"))

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


def test_invalid_settings_are_shown_instead_of_a_preview(plain_staff_client, settings):
    settings.DELISTED_RETENTION_BATCH_SIZE = 0

    response = plain_staff_client.get(PAGE)

    assert response.status_code == 200
    assert "DELISTED_RETENTION_BATCH_SIZE: batch size must be between 1 and 10000, got 0" in response.content.decode()

import uuid

import pytest
from django.urls import reverse

from catalog.models import CardStatus
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

pytestmark = pytest.mark.django_db


def property_object_url(card_id):
    return reverse("catalog:property-object-detail", args=[card_id])


def project_url(card_id):
    return reverse("catalog:project-detail", args=[card_id])


def test_published_property_object_is_served_as_json(client):
    card = PropertyObjectCardFactory(price="4500000.00")

    response = client.get(property_object_url(card.id))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "id": str(card.id),
        "project_id": str(card.project_id),
        "title": card.title,
        "status": CardStatus.PUBLISHED,
        "price": "4500000.00",
        "updated_at": card.updated_at.isoformat(),
    }


def test_property_object_without_a_price_has_a_null_price(client):
    card = PropertyObjectCardFactory(price=None)

    assert client.get(property_object_url(card.id)).json()["price"] is None


def test_published_project_is_served_as_json(client):
    card = ProjectCardFactory()

    response = client.get(project_url(card.id))

    assert response.status_code == 200
    assert response.json() == {
        "id": str(card.id),
        "developer_id": str(card.developer_id),
        "title": card.title,
        "status": CardStatus.PUBLISHED,
        "updated_at": card.updated_at.isoformat(),
    }


@pytest.mark.parametrize(
    ("factory", "url"), [(PropertyObjectCardFactory, property_object_url), (ProjectCardFactory, project_url)]
)
@pytest.mark.parametrize("traits", [{"status": CardStatus.HIDDEN}, {"long_delisted": True}])
def test_hidden_and_delisted_cards_answer_404(client, factory, url, traits):
    card = factory(**traits)

    assert client.get(url(card.id)).status_code == 404


@pytest.mark.parametrize("url", [property_object_url, project_url])
def test_unknown_id_answers_404(client, url):
    assert client.get(url(uuid.uuid4())).status_code == 404


@pytest.mark.parametrize(
    ("factory", "url"), [(PropertyObjectCardFactory, property_object_url), (ProjectCardFactory, project_url)]
)
def test_post_is_not_allowed(client, factory, url):
    card = factory()

    response = client.post(url(card.id))

    assert response.status_code == 405

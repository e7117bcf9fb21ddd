import pytest
from django.urls import reverse

from catalog.models import CardStatus, ProjectCard, PropertyObjectCard
from tests.factories import (
    BuildingDisplayOverrideFactory,
    DeveloperRankingRuleFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)

pytestmark = pytest.mark.django_db

FACTORIES = [
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
    BuildingDisplayOverrideFactory,
    DeveloperRankingRuleFactory,
]


def admin_url(model, view, *args):
    return reverse(f"admin:catalog_{model._meta.model_name}_{view}", args=args)


def listed_ids(response) -> set:
    return {row.pk for row in response.context["cl"].result_list}


@pytest.mark.parametrize("factory", FACTORIES)
def test_staff_sees_the_changelist_and_a_read_only_change_page(staff_client, factory):
    row = factory()
    model = factory._meta.model

    changelist = staff_client.get(admin_url(model, "changelist"))
    change_page = staff_client.get(admin_url(model, "change", row.pk))

    assert changelist.status_code == 200
    assert listed_ids(changelist) == {row.pk}
    assert change_page.status_code == 200
    assert not change_page.context["has_change_permission"]
    assert b'name="_save"' not in change_page.content


def test_status_filter_lists_only_cards_of_that_status(staff_client):
    PropertyObjectCardFactory()
    delisted = PropertyObjectCardFactory(long_delisted=True)
    url = admin_url(PropertyObjectCard, "changelist")

    response = staff_client.get(url, {"status__exact": CardStatus.DELISTED})

    assert response.status_code == 200
    assert listed_ids(response) == {delisted.pk}


def test_search_by_exact_id_finds_the_card(staff_client):
    wanted, _other = ProjectCardFactory(), ProjectCardFactory()

    response = staff_client.get(admin_url(ProjectCard, "changelist"), {"q": str(wanted.id)})

    assert listed_ids(response) == {wanted.pk}


def test_search_by_project_id_finds_its_property_objects(staff_client):
    project = ProjectCardFactory()
    flats = {PropertyObjectCardFactory(project_id=project.id).pk for _ in range(2)}
    PropertyObjectCardFactory()

    response = staff_client.get(admin_url(PropertyObjectCard, "changelist"), {"q": f" {project.id} "})

    assert listed_ids(response) == flats


def test_search_by_numeric_id_finds_the_override(staff_client):
    wanted, _other = PropertyObjectDisplayOverrideFactory(), PropertyObjectDisplayOverrideFactory()

    response = staff_client.get(admin_url(wanted._meta.model, "changelist"), {"q": str(wanted.pk)})

    assert listed_ids(response) == {wanted.pk}


@pytest.mark.parametrize(
    ("factory", "term"),
    [
        (ProjectCardFactory, "not-a-uuid"),
        (ProjectCardFactory, "123"),
        (PropertyObjectDisplayOverrideFactory, "not-a-uuid"),
        (PropertyObjectDisplayOverrideFactory, "99999999999999999999999"),
    ],
)
def test_search_by_a_term_that_is_no_id_lists_nothing(staff_client, factory, term):
    row = factory()

    response = staff_client.get(admin_url(row._meta.model, "changelist"), {"q": term})

    assert response.status_code == 200
    assert listed_ids(response) == set()


@pytest.mark.parametrize("factory", FACTORIES)
def test_nobody_may_add_or_delete(staff_client, factory):
    row = factory()
    model = factory._meta.model

    assert staff_client.get(admin_url(model, "add")).status_code == 403
    assert staff_client.post(admin_url(model, "add"), {}).status_code == 403
    assert staff_client.get(admin_url(model, "delete", row.pk)).status_code == 403
    assert staff_client.post(admin_url(model, "delete", row.pk), {"post": "yes"}).status_code == 403
    assert model.objects.filter(pk=row.pk).exists()


def test_a_post_to_the_change_page_leaves_a_delisted_card_untouched(staff_client):
    card = PropertyObjectCardFactory(long_delisted=True)

    response = staff_client.post(
        admin_url(PropertyObjectCard, "change", card.pk),
        {"title": "Edited", "status": CardStatus.PUBLISHED, "project_id": str(card.project_id)},
    )

    assert response.status_code == 403
    card_after = PropertyObjectCard.objects.get(pk=card.pk)
    assert (card_after.title, card_after.status, card_after.updated_at) == (
        card.title,
        CardStatus.DELISTED,
        card.updated_at,
    )


def test_changelist_offers_no_bulk_delete_action(staff_client):
    ProjectCardFactory()

    response = staff_client.get(admin_url(ProjectCard, "changelist"))

    assert response.context["action_form"] is None


@pytest.mark.parametrize("factory", FACTORIES)
def test_anonymous_user_is_sent_to_the_login_page(client, factory):
    row = factory()
    model = factory._meta.model

    for url in (admin_url(model, "changelist"), admin_url(model, "change", row.pk)):
        response = client.get(url)
        assert response.status_code == 302
        assert response.url.startswith(reverse("admin:login"))

import math
import re
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from catalog.admin.cards import EstimatedCountPaginator, PropertyObjectCardAdmin
from catalog.models import CardStatus, ProjectCard, PropertyObjectCard
from tests.factories import (
    BuildingDisplayOverrideFactory,
    DeveloperRankingRuleFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)

pytestmark = pytest.mark.django_db

PER_PAGE = PropertyObjectCardAdmin.list_per_page

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


class PaginatorExactUpToFive(EstimatedCountPaginator):
    exact_count_limit = 5


def analyzed_cards(published: int, delisted: int) -> None:
    PropertyObjectCard.objects.bulk_create(
        PropertyObjectCardFactory.build_batch(published, project_id=uuid.uuid4())
        + PropertyObjectCardFactory.build_batch(delisted, long_delisted=True, project_id=uuid.uuid4())
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE catalog.property_object_cards")  # the planner's statistics of these rows


@pytest.mark.parametrize(("filters", "expected"), [({}, 12), ({"status": CardStatus.DELISTED}, 7)])
def test_past_the_exact_limit_the_count_is_the_planners_estimate_of_the_filtered_list(filters, expected):
    analyzed_cards(published=5, delisted=7)
    paginator = PaginatorExactUpToFive(PropertyObjectCard.objects.filter(**filters).order_by("-updated_at"), 2)

    with CaptureQueriesContext(connection) as queries:
        count = paginator.count

    assert paginator.count_is_estimate
    assert count == expected  # every row sampled: the estimate of a small analyzed table is exact
    (counted,) = [query["sql"] for query in queries if not query["sql"].startswith("EXPLAIN")]
    assert "COUNT(*)" in counted and "LIMIT 6" in counted  # the count stopped past the limit


def test_up_to_the_exact_limit_the_count_is_exact():
    analyzed_cards(published=2, delisted=3)

    paginator = PaginatorExactUpToFive(PropertyObjectCard.objects.order_by("-updated_at"), 2)

    assert (paginator.count, paginator.count_is_estimate) == (5, False)


def test_a_changelist_of_many_cards_shows_an_estimate_and_never_counts_the_whole_table(staff_client):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)"
            " SELECT gen_random_uuid(), gen_random_uuid(), 'Flat ' || n, 'Published', now() - n * interval '1 minute'"
            "   FROM generate_series(1, %s) AS n",
            [EstimatedCountPaginator.exact_count_limit + 50],
        )
        cursor.execute("ANALYZE catalog.property_object_cards")

    with CaptureQueriesContext(connection) as queries:
        response = staff_client.get(admin_url(PropertyObjectCard, "changelist"), {"p": 3})

    assert response.status_code == 200
    assert re.search(r"about 10,0\d\d property object cards", response.content.decode())
    counts = [query["sql"] for query in queries if "COUNT(" in query["sql"]]
    assert counts and all("LIMIT" in sql for sql in counts)


def test_deep_pages_list_every_card_once_newest_first_with_ties_broken_by_id(staff_client):
    one_moment = timezone.now() - timedelta(days=1)
    PropertyObjectCard.objects.bulk_create(
        PropertyObjectCardFactory.build_batch(150, project_id=uuid.uuid4(), updated_at=one_moment)  # all tied
        + PropertyObjectCardFactory.build_batch(60, project_id=uuid.uuid4())
    )
    url = admin_url(PropertyObjectCard, "changelist")

    pages = range(1, math.ceil(210 / PER_PAGE) + 1)

    listed = [card.pk for page in pages for card in staff_client.get(url, {"p": page}).context["cl"].result_list]

    assert listed == list(PropertyObjectCard.objects.order_by("-updated_at", "-id").values_list("pk", flat=True))


def test_a_delisted_cards_page_says_when_it_becomes_deletable(staff_client, settings):
    settings.DELISTED_RETENTION_PERIOD_DAYS = 30
    delisted = PropertyObjectCardFactory(
        status=CardStatus.DELISTED, updated_at=datetime(2026, 1, 10, 12, 0, tzinfo=UTC)
    )
    published = PropertyObjectCardFactory()

    delisted_page = staff_client.get(admin_url(PropertyObjectCard, "change", delisted.pk)).content.decode()
    published_page = staff_client.get(admin_url(PropertyObjectCard, "change", published.pk)).content.decode()

    # In the catalog's time zone, Moscow by default (UTC+3), as every moment of the catalog's admin.
    assert re.search(r"Deletable after:</label>\s*<div class=\"readonly\">2026-02-09 15:00 MSK \(", delisted_page)
    assert re.search(r"Updated at:</label>\s*<div class=\"readonly\">2026-01-10 15:00 MSK</div>", delisted_page)
    assert "Deletable after" not in published_page


def test_the_catalogs_time_zone_is_a_setting(staff_client, settings):
    settings.CATALOG_TIME_ZONE = "Asia/Tokyo"
    card = PropertyObjectCardFactory(updated_at=datetime(2026, 1, 10, 12, 0, tzinfo=UTC))

    listed = staff_client.get(admin_url(PropertyObjectCard, "changelist")).content.decode()

    assert re.search(r'<td class="field-updated">2026-01-10 21:00 JST</td>', listed)
    assert card.updated_at.tzinfo == UTC  # the zone is the page's, not the process's


def test_prices_have_thousands_separators_and_kopecks_only_when_there_are_some(staff_client):
    PropertyObjectCardFactory(price=Decimal("44232000.00"))
    PropertyObjectCardFactory(price=Decimal("1234567.50"))

    listed = staff_client.get(admin_url(PropertyObjectCard, "changelist")).content.decode()

    prices = re.findall(r'<td class="field-price_shown">([^<]*)</td>', listed)
    assert sorted(prices) == ["1,234,567.50", "44,232,000"]
    card_page = staff_client.get(admin_url(PropertyObjectCard, "change", PropertyObjectCard.objects.first().pk))
    price = r'Price:</label>\s*<div class="readonly">(1,234,567.50|44,232,000)</div>'
    assert re.search(price, card_page.content.decode())


def test_the_overdue_filter_lists_the_cards_the_job_deletes(staff_client, settings):
    settings.DELISTED_RETENTION_PERIOD_DAYS = 30
    overdue = PropertyObjectCardFactory(long_delisted=True)
    PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now() - timedelta(days=29))
    PropertyObjectCardFactory(updated_at=timezone.now() - timedelta(days=100))  # Published: kept however old

    response = staff_client.get(admin_url(PropertyObjectCard, "changelist") + "?deletion=overdue")

    assert [card.pk for card in response.context["cl"].result_list] == [overdue.pk]


def test_the_overdue_cards_are_counted_exactly_past_the_exact_limit(staff_client, monkeypatch):
    """The planner takes status and age for independent and misjudges the overdue cards (a quarter of them at 1M
    cards): the list that the retention page links to counts them as the page does."""
    monkeypatch.setattr(EstimatedCountPaginator, "exact_count_limit", 5)
    analyzed_cards(published=20, delisted=7)

    response = staff_client.get(admin_url(PropertyObjectCard, "changelist") + "?deletion=overdue")

    paginator = response.context["cl"].paginator
    assert (paginator.count, paginator.count_is_estimate) == (7, False)
    assert "7 property object cards" in response.content.decode()


def test_the_list_goes_max_pages_deep_and_a_deeper_page_shows_the_deepest_with_the_way_to_the_rest(
    staff_client, monkeypatch
):
    monkeypatch.setattr(EstimatedCountPaginator, "max_pages", 2)
    cards = 2 * PER_PAGE + 10
    PropertyObjectCard.objects.bulk_create(PropertyObjectCardFactory.build_batch(cards, project_id=uuid.uuid4()))
    url = admin_url(PropertyObjectCard, "changelist")
    newest_first = list(PropertyObjectCard.objects.order_by("-updated_at", "-id").values_list("pk", flat=True))

    deepest = staff_client.get(url, {"p": 2})
    past_it = staff_client.get(url, {"p": 3})

    assert past_it.status_code == 200
    listed = [card.pk for card in past_it.context["cl"].result_list]
    assert listed == [card.pk for card in deepest.context["cl"].result_list] == newest_first[PER_PAGE : 2 * PER_PAGE]
    assert past_it.context["cl"].paginator.num_pages == 2
    page = past_it.content.decode()
    assert re.search(rf"{cards} property object cards\s+· the list goes 2 pages deep: sort the other way, filter", page)
    assert "?p=3" not in page  # no link past the deepest page


def test_a_list_within_max_pages_says_nothing_of_depth(staff_client):
    PropertyObjectCard.objects.bulk_create(PropertyObjectCardFactory.build_batch(PER_PAGE + 1, project_id=uuid.uuid4()))

    page = staff_client.get(admin_url(PropertyObjectCard, "changelist")).content.decode()

    assert f"{PER_PAGE + 1} property object cards" in page and "pages deep" not in page

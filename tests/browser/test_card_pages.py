"""The card pages in a browser: a Delisted card says when it becomes deletable, the lists page and filter at
100,000 cards, nothing offers to add, change or delete, and outsiders land on the login page."""

from datetime import timedelta
from urllib.parse import quote
from zoneinfo import ZoneInfo

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from catalog.models import CardStatus
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

pytestmark = pytest.mark.django_db(transaction=True)

OBJECTS = reverse("admin:catalog_propertyobjectcard_changelist")
PROJECTS = reverse("admin:catalog_projectcard_changelist")
MOSCOW = ZoneInfo("Europe/Moscow")  # CATALOG_TIME_ZONE's default: the card pages' moments are in it
RETENTION = timedelta(days=30)  # the test settings' DELISTED_RETENTION_PERIOD_DAYS (tests/conftest.py)
PER_PAGE = 50
CARDS = 100_000
DELISTED_EVERY = 40  # 2,500 Delisted cards: an exact count, under the paginator's 10,000

# 100,000 property objects of 1,000 projects, one a minute back from now, every 40th Delisted.
CREATE_CARDS = """
INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)
SELECT gen_random_uuid(), gen_random_uuid(), 'Residential complex ' || n, 'Published', now()
  FROM generate_series(1, 1000) AS n;
INSERT INTO catalog.property_object_cards (id, project_id, title, status, price, updated_at)
SELECT gen_random_uuid(), projects.ids[1 + n %% 1000], 'Flat ' || n,
       CASE WHEN n %% %(delisted_every)s = 0 THEN 'Delisted' ELSE 'Published' END, 5000000,
       now() - n * interval '1 minute'
  FROM generate_series(1, %(cards)s) AS n, (SELECT array_agg(id) AS ids FROM catalog.project_cards) AS projects;
ANALYZE catalog.project_cards, catalog.property_object_cards;
"""
PAGE_OF_IDS = """
SELECT id::text FROM catalog.property_object_cards WHERE status = ANY(%(statuses)s)
 ORDER BY updated_at DESC, id DESC OFFSET %(offset)s LIMIT %(limit)s
"""


def ids_on_page(number: int, statuses=tuple(CardStatus.values)) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(PAGE_OF_IDS, {"statuses": list(statuses), "offset": (number - 1) * PER_PAGE, "limit": PER_PAGE})
        return [card_id for (card_id,) in cursor.fetchall()]


def listed_ids(page) -> list[str]:
    return [cell.inner_text().strip() for cell in page.locator("#result_list tbody th.field-id").all()]


def assert_nothing_to_add_change_or_delete(page) -> None:
    assert page.locator("a.addlink, a.changelink, a.deletelink").count() == 0
    assert page.locator("select[name=action], input.action-select, .submit-row input, input[name=_save]").count() == 0


def test_a_delisted_cards_page_says_when_it_becomes_deletable(staff_browser):
    recent = PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=timezone.now() - timedelta(days=10))
    overdue = PropertyObjectCardFactory(long_delisted=True)
    published = PropertyObjectCardFactory()

    for card, wording in ((recent, "(in "), (overdue, "(overdue for ")):
        page = staff_browser.open(reverse("admin:catalog_propertyobjectcard_change", args=[card.pk]))

        deletable = page.locator(".field-deletable_after")
        assert deletable.locator("label").inner_text().rstrip(":") == "Deletable after"
        text = deletable.locator(".readonly").inner_text()
        assert text.startswith(f"{(card.updated_at + RETENTION).astimezone(MOSCOW):%Y-%m-%d %H:%M} MSK {wording}")
        # Read-only: every field is text, nothing to submit, no delete link.
        form_fields = "#content-main input:not([type=hidden]), #content-main select, #content-main textarea"
        assert page.locator(form_fields).count() == 0
        assert_nothing_to_add_change_or_delete(page)
        if card is recent:
            staff_browser.screenshot("delisted-card-page.png")

    page = staff_browser.open(reverse("admin:catalog_propertyobjectcard_change", args=[published.pk]))
    assert page.locator(".field-title .readonly").inner_text() == published.title
    assert page.locator(".field-deletable_after").count() == 0

    project = ProjectCardFactory(long_delisted=True)
    page = staff_browser.open(reverse("admin:catalog_projectcard_change", args=[project.pk]))
    assert page.locator(".field-deletable_after .readonly").inner_text().endswith(
        "), once none of its property-object cards remains"
    )


def test_the_card_list_pages_and_filters_at_100000_cards(staff_browser):
    with connection.cursor() as cursor:
        cursor.execute(CREATE_CARDS, {"cards": CARDS, "delisted_every": DELISTED_EVERY})

    page = staff_browser.open(OBJECTS)

    paginator = page.locator("p.paginator").inner_text()
    about = int(paginator.split("about ", 1)[1].split(" ", 1)[0].replace(",", ""))
    assert abs(about - CARDS) <= CARDS * 0.05, paginator  # the planner's estimate, no COUNT(*) of the table
    assert "the list goes 1,000 pages deep" in paginator
    assert listed_ids(page) == ids_on_page(1)
    assert_nothing_to_add_change_or_delete(page)

    with page.expect_navigation():
        page.locator("p.paginator a", has_text="2").first.click()
    staff_browser.loaded()
    assert page.url.endswith("?p=2") and listed_ids(page) == ids_on_page(2)

    page = staff_browser.open(f"{OBJECTS}?p=1000")  # the deepest page the list offers
    assert listed_ids(page) == ids_on_page(1000)

    with page.expect_navigation():
        page.locator("#changelist-filter a", has_text=CardStatus.DELISTED).click()
    staff_browser.loaded()
    assert "status__exact=Delisted" in page.url
    # Exact below 10,000: no "about".
    count_line = page.locator("p.paginator").inner_text().splitlines()[-1]
    assert count_line == f"{CARDS // DELISTED_EVERY:,} property object cards"
    assert listed_ids(page) == ids_on_page(1, [CardStatus.DELISTED])
    statuses = {cell.inner_text() for cell in page.locator("#result_list td.field-status").all()}
    assert statuses == {CardStatus.DELISTED}


def test_the_admin_index_offers_only_views(staff_browser):
    page = staff_browser.open("/admin/")

    assert page.locator("a.viewlink").count() == 6  # five catalog tables and the Delisted retention page
    assert_nothing_to_add_change_or_delete(page)
    for path in (PROJECTS, reverse("admin:catalog_propertyobjectdisplayoverride_changelist")):
        assert_nothing_to_add_change_or_delete(staff_browser.open(path))


def test_an_anonymous_visitor_lands_on_the_login_page(admin_browser):
    for path in ("/admin/", reverse("admin:catalog_delistedretention_changelist"), OBJECTS):
        page = admin_browser.open(path)

        assert page.url == admin_browser.url(f"{reverse('admin:login')}?next={quote(path)}")
        assert page.locator("#login-form").is_visible()


def test_a_user_who_is_not_staff_stays_on_the_login_page(admin_browser, django_user_model):
    django_user_model.objects.create_user("visitor", password="a-visitors-password")

    page = admin_browser.log_in("visitor", "a-visitors-password", then=OBJECTS)

    assert page.url.startswith(admin_browser.url(reverse("admin:login")))
    error = page.locator(".errornote").inner_text()
    assert "Please enter the correct username and password for a staff account" in error
    assert page.locator("#result_list").count() == 0

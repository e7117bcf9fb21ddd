"""Anonymous users learn nothing they should not: every admin page (the retention backlog page included) sends
them to the login page, and the public read endpoints answer only for Published cards, with the same 404 for a
Hidden, a Delisted and a never-existing card, so a purge or a delisting cannot be told from an unknown id."""

import uuid

import pytest
from django.contrib import admin
from django.urls import URLPattern, URLResolver, reverse

from catalog.models import CardStatus
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

pytestmark = pytest.mark.django_db

PUBLIC_ADMIN_PAGES = ("login", "logout")  # logout answers GET with 405 and shows nothing


def admin_pages_without_arguments(patterns=None, prefix="/admin/") -> list[str]:
    """Every admin URL that takes no argument: the index, each changelist and add page, any custom view."""
    pages = []
    for pattern in admin.site.get_urls() if patterns is None else patterns:
        if pattern.pattern.regex.groups or getattr(pattern, "name", None) in PUBLIC_ADMIN_PAGES:
            continue
        route = prefix + str(pattern.pattern).lstrip("^").rstrip("$")
        if isinstance(pattern, URLResolver):
            pages += admin_pages_without_arguments(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            pages.append(route)
    return pages


@pytest.fixture(params=["anonymous", "logged in, not staff"])
def outsider_client(request, client, django_user_model):
    if request.param == "logged in, not staff":
        client.force_login(django_user_model.objects.create_user("visitor", is_staff=False))
    return client


def test_every_admin_page_sends_outsiders_to_the_login_page(outsider_client, subtests):
    pages = admin_pages_without_arguments()
    assert "/admin/" in pages

    for page in pages:
        with subtests.test(page):
            response = outsider_client.get(page)
            assert response.status_code == 302
            assert response["Location"].startswith(reverse("admin:login"))


@pytest.mark.parametrize("kind", ["property-object", "project"])
def test_read_endpoints_answer_the_same_404_for_hidden_delisted_and_unknown_cards(client, kind):
    factory = PropertyObjectCardFactory if kind == "property-object" else ProjectCardFactory
    hidden = factory(status=CardStatus.HIDDEN)
    delisted = factory(long_delisted=True)

    responses = [
        client.get(reverse(f"catalog:{kind}-detail", args=[card_id]))
        for card_id in (hidden.id, delisted.id, uuid.uuid4())
    ]

    assert [response.status_code for response in responses] == [404, 404, 404]
    assert len({response.content for response in responses}) == 1


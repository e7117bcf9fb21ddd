"""/metrics is open in development and needs the bearer token when one is set, and always in production."""

import pytest

pytestmark = pytest.mark.django_db

TOKEN = "a-token-from-the-environment"


def scrape_status(client, authorization: str | None = None) -> int:
    headers = {"Authorization": authorization} if authorization is not None else {}
    return client.get("/metrics", headers=headers).status_code


def test_development_without_a_token_is_open(client, settings):
    settings.PRODUCTION = False
    settings.METRICS_BEARER_TOKEN = ""

    assert scrape_status(client) == 200


def test_production_without_a_token_is_closed_to_everyone(client, settings):
    settings.PRODUCTION = True
    settings.METRICS_BEARER_TOKEN = ""

    assert scrape_status(client) == 401
    assert scrape_status(client, "Bearer ") == 401


@pytest.mark.parametrize("production", [True, False], ids=["production", "development"])
def test_with_a_token_only_a_scrape_sending_it_gets_the_metrics(client, settings, production):
    settings.PRODUCTION = production
    settings.METRICS_BEARER_TOKEN = TOKEN

    refused = client.get("/metrics")
    assert refused.status_code == 401 and refused["WWW-Authenticate"] == "Bearer"
    assert b"catalog_delisted" not in refused.content
    assert scrape_status(client, f"Bearer {TOKEN}x") == 401
    assert scrape_status(client, TOKEN) == 401
    assert scrape_status(client, f"Bearer {TOKEN}") == 200

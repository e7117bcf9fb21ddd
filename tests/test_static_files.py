"""The admin's static files are served by the app itself (WhiteNoise), with DEBUG off and no front server."""

import pytest
from django.core.management import call_command

ADMIN_CSS = "admin/css/base.css"


def served(client) -> bytes:
    response = client.get(f"/static/{ADMIN_CSS}")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/css")
    return b"".join(response.streaming_content)


def test_production_serves_the_admin_css_collected_into_static_root(client, settings, tmp_path):
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path
    settings.WHITENOISE_USE_FINDERS = False  # production's value: only what collectstatic put there
    call_command("collectstatic", "--noinput", verbosity=0)

    assert served(client) == (tmp_path / ADMIN_CSS).read_bytes()


def test_development_serves_the_admin_css_without_collectstatic(client, settings, tmp_path):
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path  # empty

    assert b"body" in served(client)


@pytest.mark.django_db
def test_the_admin_login_page_links_the_css_it_serves(client, settings):
    settings.DEBUG = False

    assert f'href="/static/{ADMIN_CSS}"' in client.get("/admin/login/").content.decode()

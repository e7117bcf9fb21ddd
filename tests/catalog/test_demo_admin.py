"""`manage.py demo_admin` (`make admin`): a staff user with a random password on a demo catalog, and nothing, in one
line, anywhere else."""

import re
from io import StringIO

import pytest
from django.contrib.auth import authenticate, get_user_model
from django.core.management import CommandError, call_command
from django.db import connection
from django.urls import reverse

from catalog.demo_admin import (
    DEMO_STAFF_USERNAME,
    NO_CATALOG,
    REFUSED_IN_PRODUCTION,
    REFUSED_ON_A_REAL_CATALOG,
)
from catalog.demo_data import seed_demo_data
from tests.factories import ProjectCardFactory
from tests.support import database_url_of_tests, run_manage

pytestmark = pytest.mark.django_db

PASSWORD_LINE = re.compile(rf"^Staff user {DEMO_STAFF_USERNAME}, password (\S+)$", re.M)


def demo_admin() -> str:
    out = StringIO()
    call_command("demo_admin", stdout=out)
    return out.getvalue()


@pytest.fixture
def real_catalog():
    """A card seed_demo_data did not make."""
    ProjectCardFactory()


def printed_password(output: str) -> str:
    (password,) = PASSWORD_LINE.findall(output)
    return password


def test_on_a_demo_catalog_it_makes_a_staff_user_who_may_only_look():
    seed_demo_data(projects=4, objects_per_project=2, reset=False, seed=1)

    output = demo_admin()

    user = authenticate(username=DEMO_STAFF_USERNAME, password=printed_password(output))
    assert user is not None and user.is_staff and not user.is_superuser
    permissions = user.get_all_permissions()
    assert "catalog.view_propertyobjectcard" in permissions and "catalog.view_delistedretention" in permissions
    assert all(".view_" in permission for permission in permissions)
    assert f"http://127.0.0.1:8000{reverse('admin:catalog_delistedretention_changelist')}" in output


def test_each_run_gives_a_new_password_and_the_old_one_stops_working():
    first = printed_password(demo_admin())

    second = printed_password(demo_admin())

    assert first != second and len(second) >= 16
    assert authenticate(username=DEMO_STAFF_USERNAME, password=first) is None
    assert authenticate(username=DEMO_STAFF_USERNAME, password=second) is not None
    assert get_user_model().objects.filter(username=DEMO_STAFF_USERNAME).count() == 1


def test_an_empty_catalog_is_accepted_like_seed_demo_data_reset_accepts_it():
    assert PASSWORD_LINE.search(demo_admin())


def test_a_catalog_that_is_not_a_demo_is_refused_and_no_user_is_made(real_catalog):
    with pytest.raises(CommandError) as refused:
        demo_admin()

    assert str(refused.value) == REFUSED_ON_A_REAL_CATALOG.format(database=database_url_of_tests().rsplit("/", 1)[1])
    assert not get_user_model().objects.exists()


def test_production_is_refused_and_no_user_is_made(settings):
    settings.PRODUCTION = True

    with pytest.raises(CommandError, match=re.escape(REFUSED_IN_PRODUCTION)):
        demo_admin()

    assert not get_user_model().objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_refusals_are_one_line_on_stderr_and_exit_1(real_catalog):
    production = {"APP_ENV": "production", "DJANGO_SECRET_KEY": "x" * 50, "DJANGO_ALLOWED_HOSTS": "localhost"}

    for environment in ({}, production):
        finished = run_manage("demo_admin", **environment)

        assert finished.returncode == 1, finished.stderr
        assert finished.stdout == "" and len(finished.stderr.strip().splitlines()) == 1
        assert "refusing to create a demo staff user" in finished.stderr


@pytest.mark.django_db(transaction=True)
def test_a_database_without_the_catalog_is_refused_in_one_line():
    with connection.cursor() as cursor:
        cursor.execute("ALTER SCHEMA catalog RENAME TO catalog_away")
    try:
        finished = run_manage("demo_admin")
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER SCHEMA catalog_away RENAME TO catalog")

    assert finished.returncode == 1
    database = database_url_of_tests().rsplit("/", 1)[1]
    assert finished.stderr.strip() == f"CommandError: {NO_CATALOG.format(database=database)}"

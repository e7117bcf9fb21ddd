"""`make admin`: a staff user to look at a demo catalog in the admin, the way the on-call staff see a real one.

The user is staff with the catalog's view permissions only (not a superuser): the pages it sees are the read-only
ones staff get. Its password is random and printed once; each `make admin` gives it a new one. Refused with
APP_ENV=production, and on any catalog that seed_demo_data --reset would refuse to empty: a helper that makes a
login to a real catalog does not belong in a demo command.
"""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.db import connection, transaction

from catalog.demo_data import is_demo_catalog

DEMO_STAFF_USERNAME = "demo-staff"

REFUSED_IN_PRODUCTION = (
    "refusing to create a demo staff user with APP_ENV=production: "
    "give staff their own accounts there (manage.py createsuperuser, then the admin's user pages)"
)
REFUSED_ON_A_REAL_CATALOG = (
    "refusing to create a demo staff user in database {database}: its catalog is not a demo catalog; "
    "run make demo against an empty database first (DATABASE_URL)"
)
NO_CATALOG = "database {database} has no catalog schema: run make demo first"
HAS_CATALOG_SCHEMA = "SELECT to_regnamespace('catalog') IS NOT NULL"


class DemoAdminRefused(Exception):
    """Nothing was created: production, a database without the catalog, or a catalog that is not a demo."""


def check_demo_catalog() -> None:
    """Raise DemoAdminRefused unless this is a development settings' demo (or empty) catalog."""
    if settings.PRODUCTION:
        raise DemoAdminRefused(REFUSED_IN_PRODUCTION)
    database = connection.settings_dict["NAME"]
    with connection.cursor() as cursor:
        cursor.execute(HAS_CATALOG_SCHEMA)
        if not cursor.fetchone()[0]:
            raise DemoAdminRefused(NO_CATALOG.format(database=database))
    if not is_demo_catalog():  # the rule of seed_demo_data --reset: every row is demo data (or there is none)
        raise DemoAdminRefused(REFUSED_ON_A_REAL_CATALOG.format(database=database))


def create_staff_user(username: str = DEMO_STAFF_USERNAME) -> str:
    """Create the staff user, or give it a fresh password and its permissions back; return the password."""
    password = secrets.token_urlsafe(12)
    with transaction.atomic():
        user, _ = get_user_model().objects.update_or_create(
            username=username, defaults={"is_staff": True, "is_superuser": False, "is_active": True}
        )
        user.set_password(password)
        user.save()
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="catalog", codename__startswith="view_")
        )
    return password

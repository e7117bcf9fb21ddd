from collections.abc import Iterator

import psycopg
import pytest
from django.db import connection

from retention.locks import advisory_lock_key
from tests.support import CATALOG_TABLES, DEFAULT_LIMITS, database_url_of_tests

# Fixtures that start real servers: PgBouncer, a streaming standby.
pytest_plugins = ["tests.servers"]


@pytest.fixture(autouse=True)
def production_default_limits(settings):
    """Every test starts from the design document's limits, whatever the environment running the suite sets, and
    with no metrics sink: a test that reads one sets its own (not the checkout's .demo/ of development)."""
    for name, value in DEFAULT_LIMITS.items():
        setattr(settings, name, value)
    settings.DELISTED_RETENTION_METRICS_TEXTFILE = ""


@pytest.fixture(autouse=True)
def empty_catalog_after_transactional_tests(request, django_db_blocker):
    """Django's flush after a transaction=True test skips unmanaged tables: empty them ourselves."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker and marker.kwargs.get("transaction"):
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {CATALOG_TABLES}")


@pytest.fixture
def roles_to_itself(django_db_setup) -> Iterator[None]:
    """For a test that creates or grants roles: a role belongs to the whole server, which make test's two workers
    (and any other run on the same server) share, each in a test database of its own. An advisory lock belongs to a
    database: held in the server's `postgres` database, where every run's session meets, it lets one such test run
    at a time."""
    maintenance_database = database_url_of_tests().rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(maintenance_database, autocommit=True) as session:
        session.execute("SET lock_timeout = '5min'")
        session.execute("SELECT pg_advisory_lock(%s)", [advisory_lock_key("tests:roles")])
        yield


@pytest.fixture
def staff_client(client, django_user_model):
    """Logged in by force_login, so the user needs no password: hashing one (PBKDF2, a quarter of a second of CPU)
    cost the admin tests more than their requests."""
    user = django_user_model.objects.create_user("staff", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client

import pytest
from django.core.cache import cache
from django.db import connection

from tests.support import CATALOG_TABLES, DEFAULT_LIMITS

# Fixtures that start real servers: PgBouncer, a streaming standby.
pytest_plugins = ["tests.servers"]


@pytest.fixture(autouse=True)
def production_default_limits(settings):
    """Every test starts from the design document's limits, whatever the environment running the suite sets."""
    for name, value in DEFAULT_LIMITS.items():
        setattr(settings, name, value)


@pytest.fixture(autouse=True)
def empty_cache():
    """Every test counts the catalog afresh: the retention page keeps its counts for a minute (Django's cache)."""
    cache.clear()


@pytest.fixture(autouse=True)
def empty_catalog_after_transactional_tests(request, django_db_blocker):
    """Django's flush after a transaction=True test skips unmanaged tables: empty them ourselves."""
    yield
    marker = request.node.get_closest_marker("django_db")
    if marker and marker.kwargs.get("transaction"):
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {CATALOG_TABLES}")


@pytest.fixture
def staff_client(client, django_user_model):
    user = django_user_model.objects.create_user("staff", password="pw", is_staff=True, is_superuser=True)
    client.force_login(user)
    return client

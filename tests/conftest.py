import os
import shutil
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import threading
from contextlib import contextmanager

import pytest
from django.db import connection, connections, transaction

from retention.service import purge_delisted_cards

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Fixtures that start real servers: PgBouncer, a streaming standby.
pytest_plugins = ["tests.servers"]

DEFAULT_LIMITS = {
    "retention": timedelta(days=30),
    "batch_size": 2000,
    "max_batches": 100,
    "max_duration": timedelta(minutes=20),
}


def purge(**overrides):
    """The service with the production defaults, overridden per test."""
    return purge_delisted_cards(**(DEFAULT_LIMITS | overrides))


def database_url_of_tests(*, user: str | None = None) -> str:
    db = connection.settings_dict
    return f"postgres://{user or db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def advisory_lock_holders(key: int) -> list[int]:
    """Backends of the test database holding a session advisory lock on a bigint key, which pg_locks shows as
    classid (high 32 bits), objid (low 32 bits) and objsubid 1. Other databases' tests may hold the same key."""
    classid, objid = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND objid = %s AND objsubid = 1"
            " AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            [classid, objid],
        )
        return [pid for (pid,) in cursor.fetchall()]


def manage_command(*args: str) -> list[str]:
    return [sys.executable, str(PROJECT_ROOT / "manage.py"), *args]


def manage_env(**extra: str) -> dict[str, str]:
    """The environment of a manage.py subprocess talking to the test database."""
    return os.environ | {"DATABASE_URL": database_url_of_tests(), "PYTHONUNBUFFERED": "1"} | extra


def run_manage(*args: str, timeout: float = 60, **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        manage_command(*args), env=manage_env(**extra_env), capture_output=True, text=True, timeout=timeout,
        cwd=PROJECT_ROOT,
    )


def installed_tool(name: str, package: str, *, path: str | None = None) -> str:
    """The path of a Debian tool a test drives for real (looked up in `path`, else $PATH); `make test` installs it
    (scripts/install_test_tools.sh). Missing, the test skips, except in CI, where a missing tool means a broken
    set-up, not a reason to skip."""
    found = shutil.which(name, path=path)
    if found:
        return found
    message = f"{name} is not installed: Debian package {package} (scripts/install_test_tools.sh installs it as root)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


CATALOG_TABLES = (
    "catalog.project_cards, catalog.property_object_cards, catalog.property_object_display_overrides, "
    "catalog.building_display_overrides, catalog.ranking_rules"
)


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


@contextmanager
def held_in_another_transaction(operation):
    """Run `operation` in a transaction on a second connection (a thread) and keep that transaction open, with
    its row locks, until the block ends."""
    done, release = threading.Event(), threading.Event()

    def run_and_hold():
        try:
            with transaction.atomic():
                operation()
                done.set()
                release.wait(timeout=30)
        finally:
            connections.close_all()

    source = threading.Thread(target=run_and_hold)
    source.start()
    try:
        assert done.wait(timeout=30), "the operation did not finish"
        yield
    finally:
        release.set()
        source.join(timeout=30)

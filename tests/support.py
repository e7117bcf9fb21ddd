"""Helpers the tests import: the job as a service call or a real process, the test database's URL, lock holders,
a trigger that makes deletes fail, Prometheus expositions. Fixtures live in the conftest modules."""

import os
import shutil
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from django.db import connection, connections, transaction

from retention.limits import PurgeLimits
from retention.locks import advisory_lock_key
from retention.service import LOCK_NAME, purge_delisted_cards
from retention.session import JobSession, StopRequest

PROJECT_ROOT = Path(__file__).resolve().parent.parent

CATALOG_TABLES = (
    "catalog.project_cards, catalog.property_object_cards, catalog.property_object_display_overrides, "
    "catalog.building_display_overrides, catalog.ranking_rules"
)
# The production defaults of the design document, whatever the environment running the tests sets.
DEFAULT_LIMITS = {
    "DELISTED_RETENTION_PERIOD_DAYS": 30,
    "DELISTED_RETENTION_BATCH_SIZE": 2000,
    "DELISTED_RETENTION_MAX_BATCHES_PER_RUN": 100,
    "DELISTED_RETENTION_MAX_RUN_DURATION_SECONDS": 1200,
}


def limits(**changes) -> PurgeLimits:
    """The limits the settings give (the production defaults in tests), with typed changes."""
    return PurgeLimits.from_settings().replace(**changes)


def purge(*, dry_run=False, now=None, stop=None, progress=None, using=None, **limit_changes):
    """The service at the production defaults, limits changed per test."""
    return purge_delisted_cards(
        limits(**limit_changes), dry_run=dry_run, now=now, stop=stop, progress=progress, using=using,
    )


class Progress:
    """A stand-in for the command's progress bar (tqdm's reset and update): the total the run starts from, the cards
    of each batch, and a test's hook on each."""

    def __init__(self, on_batch=None, on_start=None):
        self.total, self.batches = None, []
        self.on_batch, self.on_start = on_batch, on_start

    def reset(self, total: int) -> None:
        self.total = total
        if self.on_start:
            self.on_start(total)

    def update(self, cards: int) -> None:
        self.batches.append(cards)
        if self.on_batch:
            self.on_batch(cards)


def job_session(*, using: str = "default", stop: StopRequest | None = None, **limit_changes) -> JobSession:
    """A run's session at the test limits, as purge_delisted_cards makes one."""
    return JobSession(using=using, limits=limits(**limit_changes), stop=stop or StopRequest())


def database_url_of_tests(*, user: str | None = None, alias: str = "default") -> str:
    db = connections[alias].settings_dict
    host = db["HOST"] or db.get("OPTIONS", {}).get("host", "")
    # The embedded PostgreSQL (scripts/database_url.py) listens on a Unix socket only: its directory goes into the
    # host part percent-encoded, as libpq and django-environ read it, so that the URL still ends in /<database>.
    if host.startswith("/"):
        host = urllib.parse.quote(host, safe="")
    port = f":{db['PORT']}" if db["PORT"] else ""
    return f"postgres://{user or db['USER']}@{host}{port}/{db['NAME']}"


def advisory_lock_holders(key: int) -> list[int]:
    """Backends of the test database holding a session advisory lock on a bigint key (pg_locks shows its high and
    low 32 bits). Other databases' tests may hold the same key."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = %(classid)s AND objid = %(objid)s"
            " AND objsubid = 1 AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            {"classid": (key >> 32) & 0xFFFFFFFF, "objid": key & 0xFFFFFFFF},
        )
        return [pid for (pid,) in cursor.fetchall()]


@contextmanager
def job_lock_held_elsewhere(*, url: str | None = None) -> Iterator[psycopg.Connection]:
    """The job's advisory lock held by another session, as another instance's run would: released before the
    session closes, since a closed connection's backend lets its locks go only once it has exited, which a loaded
    machine can make the next test's problem."""
    key = advisory_lock_key(LOCK_NAME)
    with psycopg.connect(url or database_url_of_tests(), autocommit=True) as other_instance:
        other_instance.execute("SELECT pg_advisory_lock(%s)", [key])
        try:
            yield other_instance
        finally:
            other_instance.execute("SELECT pg_advisory_unlock(%s)", [key])


def manage_command(*args: str) -> list[str]:
    return [sys.executable, str(PROJECT_ROOT / "manage.py"), *args]


def manage_env(**extra: str) -> dict[str, str]:
    """The environment of a manage.py subprocess talking to the test database, writing metrics nowhere unless the
    test says where."""
    test_database = {"DATABASE_URL": database_url_of_tests(), "DELISTED_RETENTION_METRICS_TEXTFILE": ""}
    return os.environ | test_database | {"PYTHONUNBUFFERED": "1"} | extra


def run_manage(*args: str, timeout: float = 60, **extra_env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        manage_command(*args), env=manage_env(**extra_env), capture_output=True, text=True, timeout=timeout,
        cwd=PROJECT_ROOT,
    )


def installed_tool(name: str, package: str, *, path: str | None = None) -> str:
    """The path of a Debian tool a test drives for real (looked up in `path`, else $PATH and the sbin folders);
    `make test` installs it (scripts/install_test_tools.sh). Missing, the test skips, except in CI, where a missing
    tool means a broken set-up, not a reason to skip."""
    found = shutil.which(name, path=path) or (path is None and shutil.which(name, path="/usr/sbin:/sbin"))
    if found:
        return found
    message = f"{name} is not installed: Debian package {package} (scripts/install_test_tools.sh installs it as root)"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


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


@contextmanager
def deletes_refused(table: str = "catalog.property_object_cards", *, when: str = "true",
                    error: str = "deletes refused by the test", sqlstate: str = "P0001") -> Iterator[None]:
    """A BEFORE DELETE trigger on `table` raising `error` (with the row's id) for each row matching `when` (a
    condition on OLD). The default SQLSTATE is a data error, as a constraint or someone else's trigger raises;
    53100 (disk full) stands for an infrastructure error, 40001 (serialization failure) for a transient one."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            CREATE FUNCTION public.refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF {when} THEN RAISE EXCEPTION '{error} %', OLD.id USING ERRCODE = '{sqlstate}'; END IF;
                RETURN OLD;
            END $$;
            CREATE TRIGGER refuse_delete BEFORE DELETE ON {table}
                FOR EACH ROW EXECUTE FUNCTION public.refuse_delete();
            """
        )
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TRIGGER refuse_delete ON {table}; DROP FUNCTION public.refuse_delete()")


@contextmanager
def first_delete_fails(sqlstate: str, table: str = "catalog.property_object_cards") -> Iterator[None]:
    """The first row a DELETE on `table` reaches raises `sqlstate`, once: a transient error that a new attempt
    clears. A sequence counts the rows, as its nextval survives the attempt's rollback."""
    with connection.cursor() as cursor:
        cursor.execute("CREATE SEQUENCE public.deleted_rows_seen")
    try:
        with deletes_refused(table, when="nextval('public.deleted_rows_seen') = 1", error="transient error of the test",
                             sqlstate=sqlstate):
            yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP SEQUENCE public.deleted_rows_seen")


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

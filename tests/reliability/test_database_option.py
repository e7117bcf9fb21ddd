"""`purge_delisted --database ALIAS`: the whole run (lock, batches, counts) on one DATABASES alias, e.g. one catalog
per region, each database with its own advisory lock. Two real databases."""

import json

import psycopg
import pytest
from django.db import connection

from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import run_purge
from tests.servers import migrate
from tests.support import database_url_of_tests, job_lock_held_elsewhere

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

OVERDUE_CARD = (
    "INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)"
    " SELECT gen_random_uuid(), gen_random_uuid(), 'flat', 'Delisted', now() - interval '40 days'"
    " FROM generate_series(1, 3)"
)


@pytest.fixture
def second_region():
    server = database_url_of_tests().rsplit("/", 1)[0]
    name = f"{connection.settings_dict['NAME']}_region2"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            migrate(f"{server}/{name}")
            with psycopg.connect(f"{server}/{name}", autocommit=True) as region:
                region.execute(OVERDUE_CARD)
            yield f"{server}/{name}"
        finally:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_each_alias_runs_on_its_own_database_under_its_own_lock(second_region):
    PropertyObjectCardFactory.create_batch(2, long_delisted=True)
    environment = {"DELISTED_RETENTION_DATABASE_URL": second_region, "DELISTED_RETENTION_LOCK_DATABASE": "default"}

    with job_lock_held_elsewhere():  # the nightly run of region 1

        region_2 = run_purge("--json", "--database", "retention", **environment)
        region_1 = run_purge("--json", **environment)

    assert region_2.returncode == 0, region_2.stderr
    assert json.loads(region_2.stdout)["deleted_property_object_cards"] == 3  # its own lock was free
    assert json.loads(region_1.stdout)["stop_reason"] == "lock_busy"
    with psycopg.connect(second_region) as region:
        assert region.execute("SELECT count(*) FROM catalog.property_object_cards").fetchone() == (0,)
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM catalog.property_object_cards")
        assert cursor.fetchone() == (2,)  # region 1 untouched


def test_an_unknown_alias_is_bad_input():
    run = run_purge("--database", "mars")

    assert run.returncode == 2
    assert "--database: no database alias 'mars'" in run.stderr

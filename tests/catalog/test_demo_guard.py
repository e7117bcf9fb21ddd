"""The demo guard: `seed_demo_data` empties (--reset) or adds to a catalog only when every row in it is demo data,
checked under a lock that keeps writers out until the commit. Each way the guard was bypassed
is a test: a copied schema comment, a real catalog restored from a demo database's schema dump, real cards added
to a demo catalog, a real card committed while the reset waited for its lock; and demo rows added to a real
catalog without --reset."""

import subprocess
import time
import uuid

import psycopg
import pytest
from django.db import connection
from psycopg import sql

from catalog import operations
from catalog.demo_data import REFUSED_REAL_CATALOG, DemoDataRefused, is_demo_catalog, seed_demo_data
from catalog.models import ProjectCard
from tests.factories import (
    BuildingDisplayOverrideFactory,
    DeveloperRankingRuleFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.servers import POSTGRES_BINDIR, POSTGRES_MAJOR
from tests.support import (
    PROJECT_ROOT,
    database_url_of_tests,
    installed_tool,
    manage_command,
    manage_env,
    run_manage,
)

pytestmark = pytest.mark.django_db

# What marked a demo catalog before this guard: a comment on schema `catalog`, which copies and dumps carry along.
LEGACY_DEMO_MARK = "Demo catalog made by manage.py seed_demo_data: --reset may empty it."
DEMO_RESET = ("seed_demo_data", "--reset", "--projects", "3", "--objects-per-project", "2")
WAIT_SECONDS = 30

EVERY_CATALOG_ROW = """
SELECT 'project', id::text FROM catalog.project_cards
UNION ALL SELECT 'object', id::text FROM catalog.property_object_cards
UNION ALL SELECT 'object override', id::text FROM catalog.property_object_display_overrides
UNION ALL SELECT 'building override', id::text FROM catalog.building_display_overrides
UNION ALL SELECT 'ranking rule', id::text FROM catalog.ranking_rules
"""


def every_catalog_row() -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(EVERY_CATALOG_ROW)
        return set(cursor.fetchall())


def refusal(database: str | None = None) -> str:
    return REFUSED_REAL_CATALOG.format(database=database or connection.settings_dict["NAME"])


def a_demo_project_id() -> uuid.UUID:
    return ProjectCard.objects.values_list("id", flat=True).first()


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "no reset"])
def test_a_real_catalog_carrying_a_copied_demo_schema_comment_is_refused(reset):
    real_card = ProjectCardFactory()
    with connection.cursor() as cursor:
        cursor.execute("COMMENT ON SCHEMA catalog IS %s", [LEGACY_DEMO_MARK])

    with pytest.raises(DemoDataRefused) as refused:
        seed_demo_data(projects=2, objects_per_project=1, reset=reset, seed=None)

    assert str(refused.value) == refusal()
    assert every_catalog_row() == {("project", str(real_card.id))}


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "no reset"])
def test_real_cards_added_through_the_operations_to_a_demo_catalog_make_it_real(reset):
    seed_demo_data(projects=3, objects_per_project=2, reset=True, seed=None)
    real_project_id = uuid.uuid4()
    operations.upsert_project(project_id=real_project_id, developer_id=uuid.uuid4(), title="A real project")
    operations.upsert_property_object(object_id=uuid.uuid4(), project_id=real_project_id, title="A real flat")
    before = every_catalog_row()

    with pytest.raises(DemoDataRefused) as refused:
        seed_demo_data(projects=2, objects_per_project=1, reset=reset, seed=None)

    assert str(refused.value) == refusal()
    assert every_catalog_row() == before


# One real row in any catalog table makes the catalog real; a demo card's override stays demo data.
REAL_ROWS = {
    "project card": lambda: ProjectCardFactory(),
    "property object card of a demo project": lambda: PropertyObjectCardFactory(project_id=a_demo_project_id()),
    "override of a real property object": lambda: PropertyObjectDisplayOverrideFactory(
        property_object_id=uuid.uuid4()
    ),
    "override of a real building": lambda: BuildingDisplayOverrideFactory(project_id=uuid.uuid4()),
    "ranking rule of a real developer": lambda: DeveloperRankingRuleFactory(),
    "ranking rule of a real project": lambda: DeveloperRankingRuleFactory(
        developer_id=ProjectCard.objects.values_list("developer_id", flat=True).first(), project_id=uuid.uuid4()
    ),
}


@pytest.mark.parametrize("add_real_row", REAL_ROWS.values(), ids=REAL_ROWS.keys())
def test_one_real_row_in_any_catalog_table_stops_the_reset(add_real_row):
    seed_demo_data(projects=3, objects_per_project=2, reset=True, seed=None)
    add_real_row()
    before = every_catalog_row()

    assert not is_demo_catalog()
    with pytest.raises(DemoDataRefused):
        seed_demo_data(projects=2, objects_per_project=1, reset=True, seed=None)
    assert every_catalog_row() == before


def test_overrides_added_to_demo_cards_keep_a_demo_catalog_resettable():
    seed_demo_data(projects=3, objects_per_project=2, reset=True, seed=None)
    operations.add_building_override(project_id=a_demo_project_id(), field="name", value="Edited by staff")

    assert is_demo_catalog()
    seed_demo_data(projects=2, objects_per_project=1, reset=True, seed=None)
    assert ProjectCard.objects.count() == 2


@pytest.fixture
def restored_database(django_db_setup):
    """The name of a scratch database next to the test database, dropped afterwards."""
    name = f"{connection.settings_dict['NAME']}_restored"
    admin_url = database_url_of_tests().rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield name
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_catalog_restored_from_a_demo_databases_schema_dump_is_not_reset(restored_database):
    # The server's own major version: pg_dump refuses a newer server (Debian's 15 against the embedded 16).
    pg_dump, psql = (
        installed_tool(name, f"postgresql-client-{POSTGRES_MAJOR}", path=POSTGRES_BINDIR)
        for name in ("pg_dump", "psql")
    )
    assert run_manage(*DEMO_RESET).returncode == 0  # the test database is now a demo database
    schema = subprocess.run(
        [pg_dump, "--schema-only", database_url_of_tests()], capture_output=True, text=True, check=True,
        timeout=WAIT_SECONDS,
    ).stdout
    restored_url = database_url_of_tests().rsplit("/", 1)[0] + f"/{restored_database}"
    subprocess.run(
        [psql, "-q", "-v", "ON_ERROR_STOP=1", restored_url], input=schema, capture_output=True, text=True,
        check=True, timeout=WAIT_SECONDS,
    )
    real_card = uuid.uuid4()
    with psycopg.connect(restored_url) as real_catalog:  # the real data loaded into the restored schema
        real_catalog.execute(
            "INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)"
            " VALUES (%s, %s, 'A real project', 'Published', now())",
            [real_card, uuid.uuid4()],
        )

    refused = run_manage(*DEMO_RESET, DATABASE_URL=restored_url)

    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [f"CommandError: {refusal(restored_database)}"]
    with psycopg.connect(restored_url) as real_catalog:
        assert real_catalog.execute("SELECT id FROM catalog.project_cards").fetchall() == [(real_card,)]


CATALOG_LOCK_WAITERS = """
SELECT count(*) FROM pg_locks
 WHERE NOT granted AND relation IN (SELECT oid FROM pg_class WHERE relnamespace = 'catalog'::regnamespace)
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
"""


def wait_for_a_catalog_lock_waiter(process: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    with connection.cursor() as cursor:
        while time.monotonic() < deadline and process.poll() is None:
            cursor.execute(CATALOG_LOCK_WAITERS)
            if cursor.fetchone()[0]:
                return
            time.sleep(0.05)
    raise AssertionError(f"seed_demo_data never waited for a catalog lock (exit status {process.poll()})")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_card_committed_while_the_reset_of_an_empty_catalog_waits_for_its_lock_is_kept():
    real_card = uuid.uuid4()
    with psycopg.connect(database_url_of_tests()) as writer:  # a real consumer, mid-transaction
        writer.execute(
            "INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)"
            " VALUES (%s, %s, 'A real project', 'Published', now())",
            [real_card, uuid.uuid4()],
        )
        reset = subprocess.Popen(
            manage_command(*DEMO_RESET), env=manage_env(), cwd=PROJECT_ROOT, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_for_a_catalog_lock_waiter(reset)
            writer.commit()
            stdout, stderr = reset.communicate(timeout=WAIT_SECONDS)
        finally:
            reset.kill()
            reset.wait()

    assert reset.returncode == 1, stderr
    assert stdout == ""
    assert stderr.strip().splitlines() == [f"CommandError: {refusal()}"]
    assert list(ProjectCard.objects.values_list("id", flat=True)) == [real_card]

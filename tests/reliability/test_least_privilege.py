"""The job runs under the least-privileged role of deploy/sql/catalog_retention_role.sql: it completes a real run
as that role, reads the standbys' lag, can touch nothing else (ranking rules, other schemas, DDL), each grant is
needed, and it can remove only what the job removes: overrides only with their card, a project only without objects,
a card only when Delisted longer than the shortest retention. Every other role works as before: a SELECT-only
role's real pg_dump, an application role's writes through catalog.operations.

The script runs in the test database. The roles it and these tests create are cluster-wide and stay (other databases
may use them); their grants go away with the test database."""

import json
import subprocess
import uuid
from datetime import timedelta

import psycopg
import pytest
from django.utils import timezone

from catalog.models import CardStatus
from tests.factories import (
    BuildingDisplayOverrideFactory,
    DeveloperRankingRuleFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.support import (
    PROJECT_ROOT,
    database_url_of_tests,
    held_in_another_transaction,
    installed_tool,
    run_manage,
)
from tests.reliability.support import (
    WAIT_SECONDS,
    CatalogState,
    execute,
    query,
    run_purge,
)
from tests.servers import POSTGRES_BINDIR, POSTGRES_MAJOR, migrate

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("roles_to_itself")]

ROLE = "catalog_retention"
ROLE_SCRIPT = PROJECT_ROOT / "deploy" / "sql" / "catalog_retention_role.sql"
OUT_OF_BOUNDS = {
    "read ranking rules": "SELECT * FROM catalog.ranking_rules",
    "delete ranking rules": "DELETE FROM catalog.ranking_rules",
    "change ranking rules": "UPDATE catalog.ranking_rules SET weight = 0",
    "restore a card": "UPDATE catalog.property_object_cards SET status = 'Published'",
    "reset a retention clock": "UPDATE catalog.project_cards SET updated_at = now()",
    "insert a card": (
        "INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at) "
        "VALUES (gen_random_uuid(), gen_random_uuid(), 'x', 'Published', now())"
    ),
    "truncate cards": "TRUNCATE catalog.property_object_cards",
    "create a table in catalog": "CREATE TABLE catalog.intruder (id int)",
    "alter a catalog table": "ALTER TABLE catalog.project_cards ADD COLUMN intruder int",
    "drop ranking rules": "DROP TABLE catalog.ranking_rules",
    "create a schema": "CREATE SCHEMA intruder",
    "create a table in public": "CREATE TABLE public.intruder (id int)",
    "read Django's users": "SELECT * FROM public.auth_user",
    "read Django's migrations": "SELECT * FROM public.django_migrations",
    "switch the guard triggers off": "ALTER TABLE catalog.building_display_overrides DISABLE TRIGGER ALL",
    "switch every trigger off for the session": "SET session_replication_role = replica",
}
CARD_TABLES = ("project_cards", "property_object_cards")
OVERRIDE_TABLES = ("property_object_display_overrides", "building_display_overrides")
GRANTED = sorted((table, privilege) for table in CARD_TABLES + OVERRIDE_TABLES for privilege in ("DELETE", "SELECT"))
# The policies the previous version of the role script created, as a database it was applied to still has them.
PREVIOUS_ROW_LEVEL_SECURITY = """
ALTER TABLE catalog.{table} ENABLE ROW LEVEL SECURITY;
CREATE POLICY everyone ON catalog.{table} USING (true) WITH CHECK (true);
CREATE POLICY retention_deletes_only_delisted ON catalog.{table} AS RESTRICTIVE FOR DELETE
    TO catalog_retention USING (status = 'Delisted');
CREATE POLICY retention_locks_only_delisted ON catalog.{table} AS RESTRICTIVE FOR UPDATE
    TO catalog_retention USING (status = 'Delisted');
"""


@pytest.fixture
def retention_role():
    execute(ROLE_SCRIPT.read_text())
    return database_url_of_tests(user=ROLE)


def ranking_rules() -> list[tuple]:
    return query("SELECT id, developer_id, project_id, weight, updated_at FROM catalog.ranking_rules ORDER BY id")


def test_the_role_script_can_be_run_again(retention_role):
    execute(ROLE_SCRIPT.read_text())

    [(can_login, is_superuser)] = query("SELECT rolcanlogin, rolsuper FROM pg_roles WHERE rolname = %s", [ROLE])
    assert (can_login, is_superuser) == (True, False)


def test_the_job_completes_a_run_as_the_least_privileged_role(retention_role):
    overdue_project = ProjectCardFactory(long_delisted=True)
    BuildingDisplayOverrideFactory(project_id=overdue_project.id)
    overdue_object = PropertyObjectCardFactory(long_delisted=True, project_id=overdue_project.id)
    PropertyObjectDisplayOverrideFactory(property_object_id=overdue_object.id, is_deleted=True)
    BuildingDisplayOverrideFactory(project_id=uuid.uuid4())  # an orphan, for the sweep
    published_object = PropertyObjectCardFactory()
    DeveloperRankingRuleFactory.create_batch(2, project_id=overdue_project.id)
    rules_before = ranking_rules()

    # Its session's bounds (retention.session) are set under the role too: the run's first transaction fails otherwise.
    run = run_purge("--batch-size", "1", DATABASE_URL=retention_role)

    assert run.returncode == 0, run.stderr
    after = CatalogState.read()
    assert after.property_objects == {published_object.id}
    assert after.projects == {published_object.project_id}
    assert after.property_object_overrides == after.building_overrides == frozenset()
    assert ranking_rules() == rules_before


def test_the_role_can_read_the_standbys_lag(replica):
    migrate(replica.primary_url)
    with psycopg.connect(replica.primary_url, autocommit=True) as primary:
        primary.execute(ROLE_SCRIPT.read_text())

    read = run_manage(
        "shell", "-c", "from retention.pacing import replica_lag; from retention.session import Session; "
        "print(replica_lag(Session()))",
        DATABASE_URL=replica.primary_url.replace("postgres@", f"{ROLE}@"),
    )

    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() != "None"  # the standby is seen, its lag read


def test_the_role_can_touch_nothing_but_what_the_purge_needs(retention_role, subtests):
    with psycopg.connect(retention_role, autocommit=True) as as_role:
        for what, statement in OUT_OF_BOUNDS.items():
            with subtests.test(what):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    as_role.execute(statement)


def test_locking_a_batch_needs_update_on_a_column_not_only_delete(retention_role):
    ProjectCardFactory(long_delisted=True)
    execute(f"REVOKE UPDATE (created_at) ON catalog.project_cards FROM {ROLE}")

    run = run_purge(DATABASE_URL=retention_role)

    assert run.returncode == 1
    assert "permission denied for table project_cards" in run.stderr


def test_under_the_role_a_delete_of_a_published_card_deletes_nothing(retention_role):
    published = PropertyObjectCardFactory()
    published_project = ProjectCardFactory()
    delisted = PropertyObjectCardFactory(long_delisted=True)

    with psycopg.connect(retention_role, autocommit=True) as as_role:
        objects = as_role.execute("DELETE FROM catalog.property_object_cards WHERE id = ANY(%s)",
                                  [[published.id, delisted.id]]).rowcount
        projects = as_role.execute("DELETE FROM catalog.project_cards WHERE id = %s", [published_project.id]).rowcount

    assert (objects, projects) == (1, 0)  # only the Delisted card
    assert query("SELECT count(*) FROM catalog.property_object_cards WHERE id = %s", [published.id]) == [(1,)]
    assert query("SELECT count(*) FROM catalog.project_cards WHERE id = %s", [published_project.id]) == [(1,)]


def count(table: str, where: str = "true", params: list | None = None) -> int:
    [(rows,)] = query(f"SELECT count(*) FROM catalog.{table} WHERE {where}", params)
    return rows


@pytest.mark.parametrize("status", [CardStatus.PUBLISHED, CardStatus.HIDDEN, CardStatus.DELISTED])
def test_under_the_role_an_override_cannot_be_deleted_while_its_card_stays(retention_role, status):
    card_age = timedelta(days=45) if status == CardStatus.DELISTED else timedelta(0)  # Delisted: overdue
    property_object = PropertyObjectCardFactory(status=status, updated_at=timezone.now() - card_age)
    project = ProjectCardFactory(status=status, updated_at=timezone.now() - card_age)
    PropertyObjectDisplayOverrideFactory(property_object_id=property_object.id)
    BuildingDisplayOverrideFactory.create_batch(2, project_id=project.id)

    with psycopg.connect(retention_role, autocommit=True) as as_role:
        for table in OVERRIDE_TABLES:
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="only with its card"):
                as_role.execute(f"DELETE FROM catalog.{table}")

    assert (count(OVERRIDE_TABLES[0]), count(OVERRIDE_TABLES[1])) == (1, 2)


def test_under_the_role_overrides_go_with_their_card_in_the_same_transaction_or_after_it(retention_role):
    project = ProjectCardFactory(long_delisted=True)
    property_object = PropertyObjectCardFactory(long_delisted=True, project_id=project.id)
    PropertyObjectDisplayOverrideFactory(property_object_id=property_object.id)
    BuildingDisplayOverrideFactory(project_id=project.id)
    PropertyObjectDisplayOverrideFactory(property_object_id=uuid.uuid4())  # an orphan

    with psycopg.connect(retention_role) as as_role, as_role.transaction():
        # Overrides first, cards last: the check is made at commit.
        as_role.execute("DELETE FROM catalog.property_object_display_overrides")
        as_role.execute("DELETE FROM catalog.building_display_overrides")
        as_role.execute("DELETE FROM catalog.property_object_cards")
        as_role.execute("DELETE FROM catalog.project_cards")

    assert [count(table) for table in CARD_TABLES + OVERRIDE_TABLES] == [0, 0, 0, 0]


@pytest.mark.parametrize("table", CARD_TABLES + OVERRIDE_TABLES)
def test_under_the_role_rows_can_be_locked_but_not_changed(retention_role, table):
    property_object = PropertyObjectCardFactory(long_delisted=True)
    PropertyObjectDisplayOverrideFactory(property_object_id=property_object.id)
    BuildingDisplayOverrideFactory(project_id=property_object.project_id)
    created_before = query(f"SELECT id, created_at FROM catalog.{table}")

    with psycopg.connect(retention_role, autocommit=True) as as_role:
        with as_role.transaction():
            locked = as_role.execute(f"SELECT id FROM catalog.{table} FOR UPDATE SKIP LOCKED").fetchall()
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="change none"):
            as_role.execute(f"UPDATE catalog.{table} SET created_at = created_at - interval '1 day'")

    assert len(locked) == 1
    assert query(f"SELECT id, created_at FROM catalog.{table}") == created_before


def test_under_the_role_a_project_that_still_has_an_object_cannot_be_deleted(retention_role):
    project = ProjectCardFactory(long_delisted=True)
    PropertyObjectCardFactory(project_id=project.id)  # Published

    with psycopg.connect(retention_role, autocommit=True) as as_role:
        deleted = as_role.execute("DELETE FROM catalog.project_cards").rowcount

    assert deleted == 0
    assert count("project_cards", "id = %s", [project.id]) == 1


@pytest.mark.parametrize(
    ("delisted_minutes_ago", "deleted"), [(1, 0), (24 * 60 - 1, 0), (24 * 60 + 1, 1)],
    ids=["a minute ago", "a minute short of a day", "a day and a minute ago"],
)
def test_under_the_role_a_card_is_deleted_only_once_delisted_longer_than_the_shortest_retention(
    retention_role, delisted_minutes_ago, deleted
):
    delisted = {"status": CardStatus.DELISTED, "updated_at": timezone.now() - timedelta(minutes=delisted_minutes_ago)}
    property_object = PropertyObjectCardFactory(**delisted)
    project = ProjectCardFactory(**delisted)

    with psycopg.connect(retention_role, autocommit=True) as as_role:
        objects = as_role.execute("DELETE FROM catalog.property_object_cards WHERE id = %s",
                                  [property_object.id]).rowcount
        projects = as_role.execute("DELETE FROM catalog.project_cards WHERE id = %s", [project.id]).rowcount

    assert (objects, projects) == (deleted, deleted)


def test_a_database_the_previous_script_was_applied_to_loses_its_row_level_security(retention_role):
    for table in CARD_TABLES:
        execute(PREVIOUS_ROW_LEVEL_SECURITY.format(table=table))

    execute(ROLE_SCRIPT.read_text())

    assert query(
        "SELECT relname, relrowsecurity FROM pg_class WHERE oid = ANY(%s::regclass[]) ORDER BY relname",
        [[f"catalog.{table}" for table in CARD_TABLES]],
    ) == [(table, False) for table in CARD_TABLES]
    assert query("SELECT policyname FROM pg_policies WHERE schemaname = 'catalog'") == []


def create_role(name: str, privileges: str) -> str:
    """A login role as an operator would make it: `privileges` on every table of schema catalog. Returns its URL."""
    execute(
        f"""
        DO $$ BEGIN CREATE ROLE {name} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$;
        DO $$ BEGIN EXECUTE format('GRANT CONNECT ON DATABASE %I TO {name}', current_database()); END $$;
        GRANT USAGE ON SCHEMA catalog TO {name};
        GRANT {privileges} ON ALL TABLES IN SCHEMA catalog TO {name};
        GRANT SELECT ON ALL SEQUENCES IN SCHEMA catalog TO {name};
        """
    )
    return database_url_of_tests(user=name)


def test_a_select_only_role_can_dump_the_catalog_with_pg_dump(retention_role):
    card = PropertyObjectCardFactory(long_delisted=True)
    PropertyObjectDisplayOverrideFactory(property_object_id=card.id)
    backup_role = create_role("catalog_backup", "SELECT")
    pg_dump = installed_tool("pg_dump", f"postgresql-client-{POSTGRES_MAJOR}", path=POSTGRES_BINDIR)

    dump = subprocess.run(
        [pg_dump, "--schema", "catalog", "--dbname", backup_role], capture_output=True, text=True,
        timeout=WAIT_SECONDS,
    )

    assert dump.returncode == 0, dump.stderr
    assert "COPY catalog.property_object_cards" in dump.stdout
    assert str(card.id) in dump.stdout


# What the application does to the catalog, as its own role: catalog.operations, and plain SQL for what an admin or a
# consumer does beyond them. Prints the row count of each plain statement.
APPLICATION_WRITES = """
import json, uuid
from django.db import connection
from catalog import operations

project, flat = uuid.uuid4(), uuid.uuid4()
operations.upsert_project(project_id=project, developer_id=uuid.uuid4(), title="Tower")
operations.upsert_property_object(object_id=flat, project_id=project, title="Flat 1")
operations.add_property_object_override(object_id=flat, field="title", value="Flat one")
operations.add_building_override(project_id=project, field="name", value="North")
operations.delist_project(project_id=project)
operations.upsert_project(project_id=project, developer_id=uuid.uuid4(), title="Tower")
operations.upsert_property_object(object_id=flat, project_id=project, title="Flat 1")
operations.delist_property_object(object_id=flat)
counts = []
with connection.cursor() as cursor:
    for statement in (
        "UPDATE catalog.property_object_display_overrides SET created_at = now(), value = '1'",
        "UPDATE catalog.building_display_overrides SET created_at = now(), is_deleted = true",
        "DELETE FROM catalog.building_display_overrides",  # of a Published project
        "DELETE FROM catalog.project_cards",  # Published, with an object
        "DELETE FROM catalog.property_object_display_overrides",  # of a card delisted a moment ago
        "DELETE FROM catalog.property_object_cards",  # delisted a moment ago
    ):
        cursor.execute(statement)
        counts.append(cursor.rowcount)
print(json.dumps(counts))
"""


def test_the_application_role_works_as_before(retention_role):
    application_role = create_role("catalog_application", "SELECT, INSERT, UPDATE, DELETE")

    run = run_manage("shell", "-c", APPLICATION_WRITES, DATABASE_URL=application_role)

    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.splitlines()[-1]) == [1, 1, 1, 1, 1, 1], run.stdout  # after Django shell's own line
    assert [count(table) for table in CARD_TABLES + OVERRIDE_TABLES] == [0, 0, 0, 0]


def run_script_with_psql() -> subprocess.CompletedProcess:
    """The role script applied as the operator does (docs/production.md)."""
    psql = installed_tool("psql", f"postgresql-client-{POSTGRES_MAJOR}", path=POSTGRES_BINDIR)
    return subprocess.run(
        [psql, "--dbname", database_url_of_tests(), "-v", "ON_ERROR_STOP=1", "-f", str(ROLE_SCRIPT)],
        capture_output=True, text=True, timeout=WAIT_SECONDS,
    )


def role_grants() -> list[tuple]:
    return query(
        "SELECT table_name, privilege_type FROM information_schema.role_table_grants WHERE grantee = %s"
        " ORDER BY 1, 2", [ROLE],
    )


def test_the_role_script_applied_during_a_long_write_gives_up_whole_instead_of_queueing_everyone(retention_role):
    execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA catalog FROM {ROLE}")  # a database without the grants yet
    card = ProjectCardFactory()

    def write_and_keep_the_transaction_open():
        execute("UPDATE catalog.project_cards SET title = 'edited' WHERE id = %s", [card.id])

    with held_in_another_transaction(write_and_keep_the_transaction_open):
        applied = run_script_with_psql()

    assert applied.returncode != 0
    assert "canceling statement due to lock timeout" in applied.stderr
    assert role_grants() == []  # nothing of it stays: its GRANTs ran before the wait
    assert run_script_with_psql().returncode == 0  # once the write is done
    assert role_grants() == GRANTED


def test_the_role_may_update_only_created_at_of_the_four_tables_it_deletes_from(retention_role):
    updatable_columns = query(
        "SELECT table_name, column_name FROM information_schema.column_privileges"
        " WHERE grantee = %s AND privilege_type = 'UPDATE' ORDER BY 1", [ROLE],
    )

    assert role_grants() == GRANTED
    assert updatable_columns == sorted((table, "created_at") for table in CARD_TABLES + OVERRIDE_TABLES)

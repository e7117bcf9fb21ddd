"""The job runs under the least-privileged role of deploy/sql/catalog_retention_role.sql: it completes a real run
as that role, reads the standbys' lag, can touch nothing else (ranking rules, other schemas, DDL), and each grant
is needed.

The script runs in the test database. The role it creates is cluster-wide and stays (other databases may use it);
its grants go away with the test database."""

import psycopg
import pytest

from tests.factories import (
    BuildingDisplayOverrideFactory,
    DeveloperRankingRuleFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.support import PROJECT_ROOT, database_url_of_tests, run_manage
from tests.reliability.support import (
    CatalogState,
    execute,
    query,
    run_purge,
)
from tests.servers import migrate

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

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
}


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
    published_object = PropertyObjectCardFactory()
    DeveloperRankingRuleFactory.create_batch(2, project_id=overdue_project.id)
    rules_before = ranking_rules()

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
        "shell", "-c", "from retention.pacing import replica_lag; print(replica_lag())",
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

"""`manage.py migrate` on an empty database yields the catalog schema the job relies on."""

import pytest
from django.db import connection

pytestmark = pytest.mark.django_db

EXPECTED_INDEXES = {
    ("project_cards", "project_cards_delisted_updated_at_idx"):
        "ON catalog.project_cards USING btree (updated_at, id) WHERE (status = 'Delisted'::text)",
    ("property_object_cards", "property_object_cards_delisted_updated_at_idx"):
        "ON catalog.property_object_cards USING btree (updated_at, id) WHERE (status = 'Delisted'::text)",
    ("property_object_cards", "property_object_cards_project_id_status_idx"):
        "ON catalog.property_object_cards USING btree (project_id, status, updated_at)",
    # The admin's card lists (catalog/admin/cards.py), newest first, with and without the status filter.
    ("project_cards", "project_cards_updated_at_idx"): "ON catalog.project_cards USING btree (updated_at, id)",
    ("project_cards", "project_cards_status_updated_at_idx"):
        "ON catalog.project_cards USING btree (status, updated_at, id)",
    ("property_object_cards", "property_object_cards_updated_at_idx"):
        "ON catalog.property_object_cards USING btree (updated_at, id)",
    ("property_object_cards", "property_object_cards_status_updated_at_idx"):
        "ON catalog.property_object_cards USING btree (status, updated_at, id)",
    ("property_object_display_overrides", "property_object_display_overrides_property_object_id_idx"):
        "ON catalog.property_object_display_overrides USING btree (property_object_id)",
    ("building_display_overrides", "building_display_overrides_project_id_idx"):
        "ON catalog.building_display_overrides USING btree (project_id)",
}


def test_migrate_creates_the_catalog_tables():
    with connection.cursor() as cursor:
        cursor.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'catalog'")
        tables = {row[0] for row in cursor.fetchall()}
    assert tables == {
        "project_cards", "property_object_cards", "property_object_display_overrides",
        "building_display_overrides", "ranking_rules",
    }


def catalog_indexes() -> dict[tuple[str, str], str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = 'catalog'")
        return {(table, name): definition for table, name, definition in cursor.fetchall()}


def test_migrate_creates_the_indexes_the_job_and_the_admin_read():
    indexes = catalog_indexes()
    for key, definition in EXPECTED_INDEXES.items():
        assert key in indexes, key
        assert indexes[key].endswith(definition), indexes[key]


@pytest.mark.django_db(transaction=True)  # CREATE/DROP INDEX CONCURRENTLY cannot run in a transaction
def test_the_admin_indexes_migration_reverses_to_the_original_project_id_index():
    from django.core.management import call_command

    added_by_0003 = {
        "project_cards_updated_at_idx", "project_cards_status_updated_at_idx", "property_object_cards_updated_at_idx",
        "property_object_cards_status_updated_at_idx", "property_object_cards_project_id_status_idx",
    }
    call_command("migrate", "catalog", "0002", verbosity=0)
    try:
        reversed_indexes = catalog_indexes()
    finally:
        call_command("migrate", "catalog", verbosity=0)

    assert reversed_indexes[("property_object_cards", "property_object_cards_project_id_idx")].endswith(
        "ON catalog.property_object_cards USING btree (project_id)"
    )
    assert not added_by_0003 & {name for _, name in reversed_indexes}
    assert added_by_0003 <= {name for _, name in catalog_indexes()}


def test_property_objects_reference_projects_without_a_foreign_key():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM information_schema.table_constraints"
            " WHERE table_schema = 'catalog' AND constraint_type = 'FOREIGN KEY'"
        )
        assert cursor.fetchone()[0] == 0


def test_status_is_constrained_to_the_three_statuses():
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)"
            " VALUES (gen_random_uuid(), gen_random_uuid(), 't', 'Archived', now())"
        )


def test_models_match_the_migrations():
    from io import StringIO

    from django.core.management import call_command

    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO())

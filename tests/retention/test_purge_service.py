"""The design document's test table, against the service on the real PostgreSQL."""

from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog.models import (
    BuildingDisplayOverride,
    CardStatus,
    DeveloperRankingRule,
    ProjectCard,
    PropertyObjectCard,
    PropertyObjectDisplayOverride,
)
from catalog.operations import UpsertOutcome, upsert_property_object
from retention.service import PurgeSettingsError, StopReason
from tests.conftest import held_in_another_transaction, purge
from tests.factories import (
    BuildingDisplayOverrideFactory,
    DeveloperRankingRuleFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 1, 3, 30, tzinfo=timezone.utc)
CUTOFF = NOW - timedelta(days=30)
LONG_AGO = CUTOFF - timedelta(days=10)


def delisted_project_with_objects(objects: int, *, updated_at=LONG_AGO) -> ProjectCard:
    """A project delisted with the INV-5 cascade: it and its objects share one updated_at."""
    project = ProjectCardFactory(status=CardStatus.DELISTED, updated_at=updated_at)
    PropertyObjectCardFactory.create_batch(
        objects, project_id=project.id, status=CardStatus.DELISTED, updated_at=updated_at
    )
    return project


def overdue_objects(count: int, **fields):
    project = ProjectCardFactory()
    return PropertyObjectCardFactory.create_batch(
        count, project_id=project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO, **fields
    )


def test_empty_batch_is_a_successful_no_op():
    ProjectCardFactory()
    PropertyObjectCardFactory(status=CardStatus.HIDDEN)

    result = purge(now=NOW)

    assert result.stop_reason == StopReason.COMPLETED
    assert (result.deleted_property_object_cards, result.deleted_project_cards, result.deleted_overrides) == (0, 0, 0)
    assert result.batches_processed == 0
    assert result.has_more is False
    assert PropertyObjectCard.objects.count() == 1 and ProjectCard.objects.count() == 2


def test_threshold_boundary_deletes_only_delisted_older_than_cutoff():
    project = ProjectCardFactory()
    just_overdue = PropertyObjectCardFactory(
        project_id=project.id, status=CardStatus.DELISTED, updated_at=CUTOFF - timedelta(seconds=1)
    )
    just_young = PropertyObjectCardFactory(
        project_id=project.id, status=CardStatus.DELISTED, updated_at=CUTOFF + timedelta(seconds=1)
    )
    ancient_published = PropertyObjectCardFactory(project_id=project.id, updated_at=LONG_AGO)
    ancient_hidden = PropertyObjectCardFactory(project_id=project.id, status=CardStatus.HIDDEN, updated_at=LONG_AGO)
    old_hidden_project = ProjectCardFactory(status=CardStatus.HIDDEN, updated_at=LONG_AGO)
    young_delisted_project = ProjectCardFactory(status=CardStatus.DELISTED, updated_at=CUTOFF + timedelta(seconds=1))
    overdue_project = ProjectCardFactory(status=CardStatus.DELISTED, updated_at=CUTOFF - timedelta(seconds=1))

    result = purge(now=NOW)

    assert result.cutoff == CUTOFF
    assert set(PropertyObjectCard.objects.values_list("id", flat=True)) == {
        just_young.id, ancient_published.id, ancient_hidden.id,
    }
    assert not PropertyObjectCard.objects.filter(id=just_overdue.id).exists()
    assert set(ProjectCard.objects.values_list("id", flat=True)) == {
        project.id, old_hidden_project.id, young_delisted_project.id,
    }
    assert not ProjectCard.objects.filter(id=overdue_project.id).exists()
    assert (result.deleted_property_object_cards, result.deleted_project_cards) == (1, 1)


def test_cutoff_comes_from_the_database_clock():
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()")
        database_now = cursor.fetchone()[0]

    result = purge(retention=timedelta(days=30))

    assert timedelta(0) <= result.cutoff - (database_now - timedelta(days=30)) < timedelta(seconds=5)


def test_property_objects_go_before_their_project_and_none_is_left_dangling():
    project = delisted_project_with_objects(5)

    first = purge(now=NOW, batch_size=2, max_batches=2)

    # Phase A was cut short by max_batches: the project must still stand over its remaining object.
    assert first.deleted_property_object_cards == 4 and first.deleted_project_cards == 0
    assert first.has_more is True and first.stop_reason == StopReason.MAX_BATCHES
    assert ProjectCard.objects.filter(id=project.id).exists()

    second = purge(now=NOW, batch_size=2, max_batches=2)

    assert (second.deleted_property_object_cards, second.deleted_project_cards) == (1, 1)
    assert second.has_more is False
    assert not PropertyObjectCard.objects.exists() and not ProjectCard.objects.exists()


def test_project_with_a_remaining_object_is_held_back_and_does_not_starve_the_loop():
    held_back = [ProjectCardFactory(status=CardStatus.DELISTED, updated_at=LONG_AGO - timedelta(days=5))
                 for _ in range(3)]
    for project in held_back:
        PropertyObjectCardFactory(project_id=project.id, status=CardStatus.HIDDEN)
    purgeable = delisted_project_with_objects(0)

    result = purge(now=NOW, batch_size=1, max_batches=5)

    assert result.deleted_project_cards == 1
    assert result.projects_held_back == 3
    assert result.has_more is False and result.stop_reason == StopReason.COMPLETED
    assert not ProjectCard.objects.filter(id=purgeable.id).exists()
    assert ProjectCard.objects.filter(id__in=[p.id for p in held_back]).count() == 3


def test_orphan_overrides_live_and_soft_deleted_are_removed_and_ranking_rules_stay():
    project = delisted_project_with_objects(2)
    doomed_object = PropertyObjectCard.objects.filter(project_id=project.id).first()
    PropertyObjectDisplayOverrideFactory(property_object_id=doomed_object.id, is_deleted=False)
    PropertyObjectDisplayOverrideFactory(property_object_id=doomed_object.id, is_deleted=True)
    BuildingDisplayOverrideFactory(project_id=project.id, is_deleted=False)
    BuildingDisplayOverrideFactory(project_id=project.id, is_deleted=True)
    survivor = PropertyObjectCardFactory()
    kept_override = PropertyObjectDisplayOverrideFactory(property_object_id=survivor.id)
    kept_building_override = BuildingDisplayOverrideFactory(project_id=survivor.project_id)
    rules = [
        DeveloperRankingRuleFactory(developer_id=project.developer_id, project_id=project.id),
        DeveloperRankingRuleFactory(developer_id=project.developer_id),
    ]

    result = purge(now=NOW)

    assert result.deleted_property_object_overrides == 2 and result.deleted_building_overrides == 2
    assert result.deleted_overrides == 4
    assert list(PropertyObjectDisplayOverride.objects.values_list("id", flat=True)) == [kept_override.id]
    assert list(BuildingDisplayOverride.objects.values_list("id", flat=True)) == [kept_building_override.id]
    assert sorted(DeveloperRankingRule.objects.values_list("id", "project_id", "weight")) == sorted(
        (rule.id, rule.project_id, rule.weight) for rule in rules
    )


def test_favorites_in_another_schema_survive_and_the_card_then_reads_as_404(client):
    project = delisted_project_with_objects(1)
    card = PropertyObjectCard.objects.get(project_id=project.id)
    with connection.cursor() as cursor:
        cursor.execute("CREATE SCHEMA favorites")
        cursor.execute("CREATE TABLE favorites.items (user_id int, card_id uuid)")
        cursor.execute("INSERT INTO favorites.items VALUES (1, %s), (2, %s)", [card.id, project.id])

    purge(now=NOW)

    with connection.cursor() as cursor:
        cursor.execute("SELECT user_id, card_id FROM favorites.items ORDER BY user_id")
        assert cursor.fetchall() == [(1, card.id), (2, project.id)]
    assert client.get(f"/catalog/property-objects/{card.id}/").status_code == 404
    assert client.get(f"/catalog/projects/{project.id}/").status_code == 404


def test_max_batches_stops_with_has_more():
    overdue_objects(5)

    result = purge(now=NOW, batch_size=2, max_batches=2)

    assert result.stop_reason == StopReason.MAX_BATCHES
    assert result.batches_processed == 2 and result.deleted_property_object_cards == 4
    assert result.has_more is True


def test_max_duration_stops_with_has_more_before_any_batch():
    overdue_objects(3)

    result = purge(now=NOW, max_duration=timedelta(microseconds=1))

    assert result.stop_reason == StopReason.MAX_DURATION
    assert result.batches_processed == 0 and result.has_more is True
    assert PropertyObjectCard.objects.count() == 3


def test_stop_request_is_honoured_between_batches():
    overdue_objects(6)
    batches_seen = []

    result = purge(now=NOW, batch_size=2, on_batch=batches_seen.append, should_stop=lambda: len(batches_seen) == 2)

    assert result.stop_reason == StopReason.STOPPED
    assert result.batches_processed == 2 and result.deleted_property_object_cards == 4
    assert result.has_more is True


def test_batches_take_the_oldest_overdue_cards_first():
    project = ProjectCardFactory()
    oldest = PropertyObjectCardFactory(project_id=project.id, status=CardStatus.DELISTED,
                                       updated_at=LONG_AGO - timedelta(days=3))
    newer = PropertyObjectCardFactory(project_id=project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO)

    purge(now=NOW, batch_size=1, max_batches=1)

    assert list(PropertyObjectCard.objects.values_list("id", flat=True)) == [newer.id]
    assert oldest.id != newer.id


@pytest.mark.parametrize(
    ("limit", "value", "message"),
    [
        ("retention", timedelta(0), "retention period must be greater than zero"),
        ("retention", timedelta(days=-1), "retention period must be greater than zero"),
        ("batch_size", 0, "batch size must be between 1 and 10000, got 0"),
        ("batch_size", 10_001, "batch size must be between 1 and 10000, got 10001"),
        ("max_batches", 0, "max batches per run must be between 1 and 1000000, got 0"),
        ("max_duration", timedelta(0), "max run duration must be greater than zero"),
    ],
)
def test_invalid_limits_are_rejected_before_anything_is_touched(limit, value, message):
    overdue_objects(2)

    with CaptureQueriesContext(connection) as queries, pytest.raises(PurgeSettingsError, match=message) as error:
        purge(now=NOW, **{limit: value})

    assert error.value.field == limit
    assert len(queries) == 0  # no lock taken, nothing read
    assert PropertyObjectCard.objects.count() == 2


def test_each_batch_runs_the_same_small_number_of_statements_whatever_its_size():
    def statements_per_batch(batch_size):
        overdue_objects(batch_size * 3)
        with CaptureQueriesContext(connection) as queries:
            result = purge(now=NOW, batch_size=batch_size)
        assert result.deleted_property_object_cards == batch_size * 3
        selections = [q for q in queries if "FOR UPDATE SKIP LOCKED" in q["sql"]]
        deletions = [q for q in queries if q["sql"].lstrip().startswith("WITH deleted_cards")]
        return len(queries), len(selections), len(deletions)

    small = statements_per_batch(2)
    large = statements_per_batch(50)

    # Both runs: 3 full batches, then one empty selection per phase; one DELETE statement per batch.
    assert small == large
    assert small[1:] == (5, 3)


def test_dry_run_deletes_nothing_and_predicts_exactly_what_the_run_deletes():
    for _ in range(3):
        project = delisted_project_with_objects(3)
        BuildingDisplayOverrideFactory(project_id=project.id, is_deleted=True)
        for card in PropertyObjectCard.objects.filter(project_id=project.id):
            PropertyObjectDisplayOverrideFactory(property_object_id=card.id)
    blocked = delisted_project_with_objects(1)
    PropertyObjectCardFactory(project_id=blocked.id)
    overdue_objects(4)

    for limits in ({"batch_size": 3, "max_batches": 2}, {"batch_size": 4, "max_batches": 5}, {"batch_size": 100}):
        preview = purge(now=NOW, dry_run=True, **limits)
        assert PropertyObjectCard.objects.count() + ProjectCard.objects.count() > 0
        real = purge(now=NOW, **limits)
        compared = (
            "deleted_property_object_cards", "deleted_project_cards", "deleted_property_object_overrides",
            "deleted_building_overrides", "batches_processed", "has_more", "stop_reason",
            "overdue_property_object_cards", "overdue_project_cards",
        )
        assert {f: getattr(preview, f) for f in compared} == {f: getattr(real, f) for f in compared}, limits
        assert preview.dry_run is True and real.dry_run is False
    assert real.projects_held_back == preview.projects_held_back == 1


def test_dry_run_changes_no_row():
    delisted_project_with_objects(3)
    before = sorted(PropertyObjectCard.objects.values_list("id", "updated_at"))

    preview = purge(now=NOW, dry_run=True)

    assert preview.deleted_property_object_cards == 3 and preview.deleted_project_cards == 1
    assert sorted(PropertyObjectCard.objects.values_list("id", "updated_at")) == before
    assert ProjectCard.objects.count() == 1


def test_upsert_after_purge_creates_a_fresh_published_card_with_the_same_id():
    project = ProjectCardFactory()
    (card,) = overdue_objects(1)
    card.project_id = project.id
    card.save()

    purge(now=NOW)
    outcome = upsert_property_object(object_id=card.id, project_id=project.id, title="Flat 7")

    assert outcome == UpsertOutcome.CREATED
    fresh = PropertyObjectCard.objects.get(id=card.id)
    assert (fresh.status, fresh.title) == (CardStatus.PUBLISHED, "Flat 7")


@pytest.mark.django_db(transaction=True)
def test_restore_holding_the_row_lock_wins_and_the_card_survives():
    project = ProjectCardFactory()
    restored_card, other = PropertyObjectCardFactory.create_batch(
        2, project_id=project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO
    )
    def restore():
        upsert_property_object(object_id=restored_card.id, project_id=project.id, title="Back on sale")

    with held_in_another_transaction(restore):
        result = purge(now=NOW)

    assert result.deleted_property_object_cards == 1
    assert not PropertyObjectCard.objects.filter(id=other.id).exists()
    assert PropertyObjectCard.objects.get(id=restored_card.id).status == CardStatus.PUBLISHED


@pytest.mark.django_db(transaction=True)
def test_failing_batch_rolls_back_alone_and_the_next_run_finishes_the_rest(caplog):
    project = ProjectCardFactory()
    for index in range(6):
        card = PropertyObjectCardFactory(
            project_id=project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO + timedelta(minutes=index),
            title="poison" if index == 4 else f"flat {index}",
        )
        PropertyObjectDisplayOverrideFactory(property_object_id=card.id)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION catalog.refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF OLD.title = 'poison' THEN RAISE EXCEPTION 'poison card %', OLD.id; END IF;
                RETURN OLD;
            END $$;
            CREATE TRIGGER refuse_poison BEFORE DELETE ON catalog.property_object_cards
                FOR EACH ROW EXECUTE FUNCTION catalog.refuse_poison();
            """
        )
    try:
        with pytest.raises(Exception, match="poison card"):
            purge(now=NOW, batch_size=2)
        # Batches 1 and 2 (cards 0..3) committed; batch 3 (cards 4, 5) rolled back whole, overrides included.
        assert PropertyObjectCard.objects.count() == 2
        assert PropertyObjectDisplayOverride.objects.count() == 2
        failure = next(r for r in caplog.records if r.levelname == "ERROR")
        assert failure.phase == "property_objects" and failure.batch_index == 2
        assert all(str(card_id) in failure.batch_ids for card_id in PropertyObjectCard.objects.values_list("id", flat=True))
        assert failure.run_id
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER refuse_poison ON catalog.property_object_cards")
            cursor.execute("DROP FUNCTION catalog.refuse_poison()")

    result = purge(now=NOW, batch_size=2)

    assert result.deleted_property_object_cards == 2 and result.stop_reason == StopReason.COMPLETED
    assert not PropertyObjectCard.objects.exists() and not PropertyObjectDisplayOverride.objects.exists()


def test_every_log_record_of_a_run_carries_its_run_id(caplog):
    caplog.set_level("DEBUG", logger="retention")
    overdue_objects(3)

    result = purge(now=NOW, batch_size=2)

    records = [r for r in caplog.records if r.name == "retention.service"]
    assert len(records) == 4  # started, two batches, completed
    assert {r.run_id for r in records} == {str(result.run_id)}
    assert [r.levelname for r in records] == ["INFO", "DEBUG", "DEBUG", "INFO"]
    assert all("title" not in r.getMessage() and "flat" not in r.getMessage().lower() for r in records)


def test_a_run_writes_no_checkpoint_audit_or_outbox_rows():
    overdue_objects(3)
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, n_tup_ins FROM pg_stat_xact_user_tables WHERE n_tup_ins > 0")
        inserts_before = dict(cursor.fetchall())

    purge(now=NOW)

    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, n_tup_ins FROM pg_stat_xact_user_tables WHERE n_tup_ins > 0")
        assert dict(cursor.fetchall()) == inserts_before

"""The design document's test table, against the service on the real PostgreSQL."""

import time
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
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
from catalog.operations import CardNotFound, UpsertOutcome, add_property_object_override, upsert_property_object
from config.logging import TextFormatter
from retention.batches import delete_batch
from retention.limits import PurgeLimitsError
from retention.phases import PROPERTY_OBJECTS
from retention.results import Run, StopReason
from retention.service import purge_delisted_cards
from retention.session import StopRequest
from tests.support import (
    Progress, database_url_of_tests, deletes_refused, held_in_another_transaction, job_session, purge,
)
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

    # The run's clock starts before its start count; by the first batch its one second is gone.
    result = purge(now=NOW, max_duration=timedelta(seconds=1), progress=Progress(on_start=lambda total: time.sleep(1.05)))

    assert result.stop_reason == StopReason.MAX_DURATION
    assert result.batches_processed == 0 and result.has_more is True
    assert PropertyObjectCard.objects.count() == 3


def test_stop_request_is_honoured_between_batches():
    overdue_objects(6)
    batches_seen = []
    stop = StopRequest()

    def stop_after_two_batches(deleted):
        batches_seen.append(deleted)
        if len(batches_seen) == 2:
            stop.request()

    result = purge(now=NOW, batch_size=2, progress=Progress(on_batch=stop_after_two_batches), stop=stop)

    assert result.stop_reason == StopReason.STOPPED
    assert result.batches_processed == 2 and result.deleted_property_object_cards == 4
    assert result.has_more is True


def test_batches_take_the_oldest_overdue_cards_first():
    project = ProjectCardFactory()
    # The newer card is written first, so the table's own order is not the age order.
    newer = PropertyObjectCardFactory(project_id=project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO)
    PropertyObjectCardFactory(project_id=project.id, status=CardStatus.DELISTED,
                              updated_at=LONG_AGO - timedelta(days=3))

    result = purge(now=NOW, batch_size=1, max_batches=1)

    assert result.deleted_property_object_cards == 1
    assert list(PropertyObjectCard.objects.values_list("id", flat=True)) == [newer.id]


@pytest.mark.parametrize(
    ("limit", "value", "message"),
    [
        ("retention", timedelta(0), "retention period must be greater than 0 and at most 36500 days, got 0 days"),
        ("retention", timedelta(days=-1),
         "retention period must be greater than 0 and at most 36500 days, got -1 days"),
        ("retention", 30, "retention must be timedelta(days=…), got int 30"),
        ("batch_size", 0, "batch size must be between 1 and 10000, got 0"),
        ("batch_size", 10_001, "batch size must be between 1 and 10000, got 10001"),
        ("batch_size", "2000", "batch_size must be a number, got str '2000'"),
        ("max_batches", 0, "max batches per run must be between 1 and 1000000, got 0"),
        ("max_duration", timedelta(0),
         "max run duration must be greater than 0 and at most 86400 seconds, got 0 seconds"),
    ],
)
def test_invalid_limits_are_rejected_before_anything_is_touched(limit, value, message):
    overdue_objects(2)

    with CaptureQueriesContext(connection) as queries, pytest.raises(PurgeLimitsError) as error:
        purge(now=NOW, **{limit: value})

    [(bad_limit, problem)] = error.value.problems
    assert (bad_limit.field, problem) == (limit, message)
    assert len(queries) == 0  # no lock taken, nothing read
    assert PropertyObjectCard.objects.count() == 2


def test_every_bad_limit_is_reported_at_once(settings):
    settings.DELISTED_RETENTION_BATCH_SIZE = 0
    settings.DELISTED_RETENTION_LOCK_TIMEOUT_MS = -1

    with pytest.raises(PurgeLimitsError) as error:
        purge()

    assert [limit.setting for limit, _ in error.value.problems] == [
        "DELISTED_RETENTION_BATCH_SIZE", "DELISTED_RETENTION_LOCK_TIMEOUT_MS",
    ]


def test_without_arguments_the_service_runs_at_the_settings_limits(settings):
    settings.DELISTED_RETENTION_BATCH_SIZE = 2
    settings.DELISTED_RETENTION_MAX_BATCHES_PER_RUN = 1
    overdue_objects(3)

    result = purge_delisted_cards()

    assert (result.deleted_property_object_cards, result.stop_reason, result.has_more) == (
        2, StopReason.MAX_BATCHES, True,
    )


def catalog_for_previews() -> None:
    """14 overdue objects: 3 Delisted projects with 3 objects each (overrides on all), a Delisted project held back
    by a Published object, and 4 overdue objects of a Published project."""
    for _ in range(3):
        project = delisted_project_with_objects(3)
        BuildingDisplayOverrideFactory(project_id=project.id, is_deleted=True)
        for card in PropertyObjectCard.objects.filter(project_id=project.id):
            PropertyObjectDisplayOverrideFactory(property_object_id=card.id)
    blocked = delisted_project_with_objects(1)
    PropertyObjectCardFactory(project_id=blocked.id)
    overdue_objects(4)


@pytest.mark.parametrize(
    "limits",
    [
        {"batch_size": 3, "max_batches": 2},  # stops inside the objects: projects held back by overdue objects
        {"batch_size": 7, "max_batches": 2},  # every object in full batches: the projects never get a batch
        {"batch_size": 4, "max_batches": 5},  # objects, then the projects take the last batch
        {"batch_size": 100},  # everything
    ],
    ids=str,
)
def test_dry_run_deletes_nothing_and_predicts_exactly_what_the_run_deletes(limits):
    catalog_for_previews()
    before = PropertyObjectCard.objects.count() + ProjectCard.objects.count()

    preview = purge(now=NOW, dry_run=True, **limits)
    assert PropertyObjectCard.objects.count() + ProjectCard.objects.count() == before
    real = purge(now=NOW, **limits)

    compared = (
        "deleted_property_object_cards", "deleted_project_cards", "deleted_property_object_overrides",
        "deleted_building_overrides", "batches_processed", "has_more", "stop_reason", "projects_held_back",
        "overdue_property_object_cards", "overdue_project_cards",
    )
    assert {f: getattr(preview, f) for f in compared} == {f: getattr(real, f) for f in compared}
    assert real.deleted_property_object_cards > 0
    assert preview.dry_run is True and real.dry_run is False


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
def test_a_card_skipped_by_two_batches_is_left_to_the_next_run_and_no_later_batch_reads_it_again():
    cards = cards_aged_in_order(7)
    holder = psycopg.connect(database_url_of_tests())
    holder.execute("SELECT FROM catalog.property_object_cards WHERE id = %s FOR UPDATE", [cards[1].id])
    batches = []

    def release_after_the_second_batch(deleted):
        batches.append(deleted)
        if len(batches) == 2:
            holder.rollback()  # free from the third batch on, which resumes after the first batch's last card

    try:
        result = purge(now=NOW, batch_size=2, progress=Progress(on_batch=release_after_the_second_batch))
    finally:
        holder.close()

    # Batch 1 took cards 0 and 2, batch 2 (from the start again) 3 and 4, batch 3 (after card 2) 5 and 6, batch 4
    # (after card 4) none.
    assert result.deleted_property_object_cards == 6 and result.batches_processed == 3
    assert list(PropertyObjectCard.objects.values_list("id", flat=True)) == [cards[1].id]
    assert result.stop_reason == StopReason.COMPLETED and result.has_more is True

    result = purge(now=NOW, batch_size=2)

    assert result.deleted_property_object_cards == 1 and result.has_more is False
    assert not PropertyObjectCard.objects.exists()


def cards_aged_in_order(count: int, *, poison: set[int] = frozenset()) -> list:
    """Overdue objects, oldest first, each with an override; those at the `poison` positions titled "poison"."""
    project = ProjectCardFactory()
    cards = []
    for index in range(count):
        card = PropertyObjectCardFactory(
            project_id=project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO + timedelta(minutes=index),
            title="poison" if index in poison else f"flat {index}",
        )
        PropertyObjectDisplayOverrideFactory(property_object_id=card.id)
        cards.append(card)
    return cards


@pytest.mark.django_db(transaction=True)
def test_an_infrastructure_error_rolls_its_batch_back_alone_and_the_next_run_finishes_the_rest(caplog):
    cards_aged_in_order(6, poison={4})

    with deletes_refused(when="OLD.title = 'poison'", sqlstate="53100"):
        result = purge(now=NOW, batch_size=2)

    # Batches 1 and 2 (cards 0..3) committed; batch 3 (cards 4, 5) rolled back whole, overrides included.
    assert PropertyObjectCard.objects.count() == 2 and PropertyObjectDisplayOverride.objects.count() == 2
    assert (result.stop_reason, result.batches_processed, result.deleted_property_object_cards) == (
        StopReason.FAILED, 2, 4,
    )
    assert "deletes refused by the test" in result.error
    failed = next(r for r in caplog.records if r.getMessage() == "batch failed")
    assert (failed.phase, failed.batch_index, failed.sqlstate, failed.run_id) == (
        "property_objects", 2, "53100", str(result.run_id),
    )
    [ids] = [r.batch_ids for r in caplog.records if r.getMessage() == "batch ids"]
    assert sorted(ids) == sorted(str(card_id) for card_id in PropertyObjectCard.objects.values_list("id", flat=True))

    result = purge(now=NOW, batch_size=2)

    assert result.deleted_property_object_cards == 2 and result.stop_reason == StopReason.COMPLETED
    assert not PropertyObjectCard.objects.exists() and not PropertyObjectDisplayOverride.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_poison_card_is_isolated_the_rest_is_deleted_and_the_run_counts_as_failed(caplog):
    cards = cards_aged_in_order(40, poison={5, 17})
    project = delisted_project_with_objects(0)

    with deletes_refused(when="OLD.title = 'poison'"):
        result = purge(now=NOW, batch_size=16)

    poison = {cards[5].id, cards[17].id}
    assert set(PropertyObjectCard.objects.values_list("id", flat=True)) == poison
    assert set(PropertyObjectDisplayOverride.objects.values_list("property_object_id", flat=True)) == poison
    assert not ProjectCard.objects.filter(id=project.id).exists()  # the run went on to the projects
    assert result.deleted_property_object_cards == 38 and result.deleted_project_cards == 1
    assert {(c.phase, c.card_id) for c in result.culprits} == {("property_objects", str(i)) for i in poison}
    assert all("deletes refused by the test" in c.error for c in result.culprits)
    assert result.outcome == "failed" and result.has_more is False
    culprit_lines = [r for r in caplog.records if r.levelname == "ERROR" and hasattr(r, "card_id")]
    assert sorted(r.card_id for r in culprit_lines) == sorted(str(i) for i in poison)  # each logged once


def test_a_project_held_back_by_a_poison_object_stays_held_back():
    project = delisted_project_with_objects(3)
    PropertyObjectCard.objects.filter(project_id=project.id).update(title="poison")

    with deletes_refused(when="OLD.title = 'poison'"):
        result = purge(now=NOW)

    assert ProjectCard.objects.filter(id=project.id).exists()
    assert PropertyObjectCard.objects.filter(project_id=project.id).count() == 3
    assert result.projects_held_back == 1 and len(result.culprits) == 3


def test_every_log_record_of_a_run_carries_its_run_id(caplog):
    caplog.set_level("DEBUG", logger="retention")
    overdue_objects(3)

    result = purge(now=NOW, batch_size=2)

    records = [r for r in caplog.records if r.name == "retention.service"]
    assert len(records) == 4  # started, two batches, completed
    assert {r.run_id for r in records} == {str(result.run_id)}
    assert [r.levelname for r in records] == ["INFO", "DEBUG", "DEBUG", "INFO"]
    # No PII: ids and counters only, in the message and in the structured fields alike.
    assert all("flat" not in TextFormatter().format(r).lower() for r in records)


def test_a_run_writes_no_checkpoint_audit_or_outbox_rows():
    overdue_objects(3)
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, n_tup_ins FROM pg_stat_xact_user_tables WHERE n_tup_ins > 0")
        inserts_before = dict(cursor.fetchall())

    purge(now=NOW)

    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, n_tup_ins FROM pg_stat_xact_user_tables WHERE n_tup_ins > 0")
        assert dict(cursor.fetchall()) == inserts_before


def test_overrides_left_by_writers_outside_the_protocol_are_swept_and_counted():
    survivor = PropertyObjectCardFactory()
    kept = PropertyObjectDisplayOverrideFactory(property_object_id=survivor.id)
    PropertyObjectDisplayOverrideFactory.create_batch(3, property_object_id=uuid.uuid4())  # its card is gone
    BuildingDisplayOverrideFactory(project_id=uuid.uuid4())

    result = purge(now=NOW, batch_size=2)

    assert (result.deleted_property_object_overrides, result.deleted_building_overrides) == (3, 1)
    assert list(PropertyObjectDisplayOverride.objects.values_list("id", flat=True)) == [kept.id]
    assert not BuildingDisplayOverride.objects.exists()
    assert result.stop_reason == StopReason.COMPLETED


@pytest.mark.django_db(transaction=True)
def test_a_writer_following_the_protocol_holds_its_card_and_the_run_reports_has_more():
    (card,) = overdue_objects(1)

    def write_override():
        add_property_object_override(object_id=card.id, field="title", value="sea view")

    with held_in_another_transaction(write_override):
        result = purge(now=NOW)

    # The card was row-locked by the writer: skipped, and the run says overdue cards remain.
    assert result.deleted_property_object_cards == 0 and result.has_more is True
    assert PropertyObjectDisplayOverride.objects.filter(property_object_id=card.id).count() == 1

    purge(now=NOW)

    assert not PropertyObjectCard.objects.filter(id=card.id).exists()
    assert not PropertyObjectDisplayOverride.objects.exists()
    with pytest.raises(CardNotFound):
        add_property_object_override(object_id=card.id, field="title", value="too late")


def test_the_sweep_looks_at_overrides_written_within_its_window_and_a_wider_window_reaches_older_ones():
    recent = PropertyObjectDisplayOverrideFactory(property_object_id=uuid.uuid4())  # its card is gone
    old_object_orphan = PropertyObjectDisplayOverrideFactory(property_object_id=uuid.uuid4())
    old_building_orphan = BuildingDisplayOverrideFactory(project_id=uuid.uuid4())
    written_long_ago = datetime.now(timezone.utc) - timedelta(days=30)
    for old_orphan in (old_object_orphan, old_building_orphan):  # a queryset update: past the models' auto_now
        type(old_orphan).objects.filter(id=old_orphan.id).update(created_at=written_long_ago)

    nightly = purge(now=NOW, orphan_sweep_window=timedelta(days=7))

    assert (nightly.deleted_property_object_overrides, nightly.deleted_building_overrides) == (1, 0)
    assert not PropertyObjectDisplayOverride.objects.filter(id=recent.id).exists()
    assert PropertyObjectDisplayOverride.objects.filter(id=old_object_orphan.id).exists()
    assert BuildingDisplayOverride.objects.filter(id=old_building_orphan.id).exists()

    wide = purge(now=NOW, orphan_sweep_window=timedelta(days=31))

    assert (wide.deleted_property_object_overrides, wide.deleted_building_overrides) == (1, 1)
    assert not PropertyObjectDisplayOverride.objects.exists() and not BuildingDisplayOverride.objects.exists()


def test_the_start_count_skips_the_held_back_probe_and_the_end_count_reports_it():
    held_back = delisted_project_with_objects(1)
    PropertyObjectCardFactory(project_id=held_back.id)  # Published: holds its project back
    progress = Progress()

    result = purge(now=NOW, progress=progress)

    assert progress.total == 2  # the project and its overdue object; who holds whom back is counted at the end
    assert result.projects_held_back == 1 and result.deleted_project_cards == 0


def test_once_a_batch_s_transaction_has_ended_no_batch_is_in_flight_after_an_empty_one_too():
    """Run.in_flight names the batch whose COMMIT a lost connection would leave unknown; one that ended, or a phase run
    dry, must not be named in its stead."""
    PropertyObjectCardFactory(long_delisted=True, updated_at=LONG_AGO)
    session = job_session(batch_size=10)
    run = Run(session.run_id, cutoff=CUTOFF)
    with session:
        outcomes = [delete_batch(session, run, PROPERTY_OBJECTS, PROPERTY_OBJECTS.first_key, None) for _ in range(2)]
        assert run.in_flight is None

    assert [outcome.selected for outcome in outcomes] == [1, 0]
    assert not PropertyObjectCard.objects.exists()

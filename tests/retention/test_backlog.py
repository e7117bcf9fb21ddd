"""The backlog counts and the preview reckoned from them: the preview must say what a real run then does."""

from datetime import datetime, timedelta, timezone

import pytest

from catalog.admin.retention_page import held_back_after_run, held_back_now_and_after
from catalog.models import CardStatus, ProjectCard, PropertyObjectCard
from retention import backlog
from retention.backlog import compute_cutoff, measure_backlog
from retention.preview import count_held_back, objects_taken, preview_run
from retention.session import Session
from tests.support import purge
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 6, 1, 3, 30, tzinfo=timezone.utc)
RETENTION = timedelta(days=30)
CUTOFF = NOW - RETENTION
LONG_AGO = CUTOFF - timedelta(days=10)
RECENTLY = CUTOFF + timedelta(days=5)


def delisted_project(objects: int = 0) -> str:
    """An overdue project and `objects` property objects delisted with it (the INV-5 cascade)."""
    project = ProjectCardFactory(status=CardStatus.DELISTED, updated_at=LONG_AGO)
    PropertyObjectCardFactory.create_batch(
        objects, project_id=project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO
    )
    return project.id


def catalog() -> None:
    """9 overdue property objects and 6 overdue projects: 4 of those are held back now, 2 of them (a Published
    object, a recently delisted one) still once the overdue objects are gone, and 4 are then purgeable."""
    delisted_project(3)
    delisted_project(3)
    PropertyObjectCardFactory(project_id=delisted_project(1))
    PropertyObjectCardFactory(project_id=delisted_project(), status=CardStatus.DELISTED, updated_at=RECENTLY)
    delisted_project()
    delisted_project()
    live_project = ProjectCardFactory()
    PropertyObjectCardFactory.create_batch(
        2, project_id=live_project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO
    )
    PropertyObjectCardFactory(project_id=live_project.id, status=CardStatus.DELISTED, updated_at=RECENTLY)


def held_back_after(*, cutoff: datetime, objects: int) -> int:
    """The dry run's count: the overdue projects still held back once a run reaching `objects` overdue objects ends."""
    with Session().transaction() as cursor:
        return count_held_back(cursor, objects_taken(cursor, cutoff=cutoff, objects=objects))


def test_the_counts_of_the_catalog():
    catalog()

    backlog = measure_backlog(Session(), cutoff=CUTOFF)

    assert (backlog.property_objects.overdue, backlog.projects.overdue) == (9, 6)
    assert (backlog.projects.held_back, held_back_after(cutoff=CUTOFF, objects=9)) == (4, 2)
    assert held_back_now_and_after(Session(), cutoff=CUTOFF) == (4, 2)  # the admin page's one probe a project


@pytest.mark.parametrize(
    ("status", "updated_at", "held_back_after_overdue_objects"),
    [
        (CardStatus.PUBLISHED, LONG_AGO, 1),
        (CardStatus.HIDDEN, LONG_AGO, 1),
        (CardStatus.DELISTED, CUTOFF, 1),  # the cutoff itself is not overdue
        (CardStatus.DELISTED, CUTOFF - timedelta(microseconds=1), 0),
    ],
)
def test_the_pages_probe_of_a_project_agrees_with_the_rule(status, updated_at, held_back_after_overdue_objects):
    """The admin page reads a project's last object in (status, updated_at) order; the job's rule asks for any."""
    project = delisted_project(2)
    PropertyObjectCardFactory(project_id=project, status=status, updated_at=updated_at)
    delisted_project()
    overdue_objects = measure_backlog(Session(), cutoff=CUTOFF).property_objects.overdue

    counts = held_back_now_and_after(Session(), cutoff=CUTOFF)

    assert counts == (1, held_back_after_overdue_objects)
    assert counts[1] == held_back_after(cutoff=CUTOFF, objects=overdue_objects)


@pytest.mark.parametrize("chunk", [1, 2, 4])
def test_a_count_in_many_chunks_equals_the_count_in_one(monkeypatch, chunk):
    catalog()  # many cards share one updated_at (a cascade): the chunks' keyset must break ties by id
    in_one = measure_backlog(Session(), cutoff=CUTOFF)

    monkeypatch.setattr(backlog, "COUNT_CHUNK", chunk)
    monkeypatch.setattr(backlog, "HELD_BACK_CHUNK", chunk)
    in_chunks = measure_backlog(Session(), cutoff=CUTOFF, in_chunks=True)

    assert in_chunks == in_one
    assert (in_one.property_objects.delisted, in_one.projects.overdue, in_one.projects.held_back) == (11, 6, 4)
    # The end count chunks where the start count's chunks ended, over the cards the run deleted meanwhile.
    PropertyObjectCard.objects.filter(status=CardStatus.DELISTED, updated_at=LONG_AGO).first().delete()
    at_end = measure_backlog(Session(), cutoff=CUTOFF, within_window_from=in_chunks, in_chunks=True)
    assert at_end == measure_backlog(Session(), cutoff=CUTOFF, within_window_from=in_one)
    assert (at_end.property_objects.delisted, at_end.property_objects.overdue) == (10, 8)


def test_the_end_count_recounts_the_overdue_cards_and_takes_those_within_the_window_from_the_start():
    catalog()  # 11 Delisted property objects, 9 overdue; 6 Delisted projects, all overdue
    at_start = measure_backlog(Session(), cutoff=CUTOFF)
    PropertyObjectCard.objects.filter(status=CardStatus.DELISTED, updated_at=LONG_AGO).first().delete()  # as a run
    oldest = PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=LONG_AGO - timedelta(days=1))
    PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=RECENTLY)  # delisted within the window

    at_end = measure_backlog(Session(), cutoff=CUTOFF, within_window_from=at_start)

    assert (at_start.property_objects.delisted, at_start.property_objects.overdue) == (11, 9)
    # 9 overdue: one deleted, one more overdue; within the window still the 2 of the start count, not 3.
    assert (at_end.property_objects.delisted, at_end.property_objects.overdue) == (2 + 9, 9)
    assert at_end.property_objects.oldest_delisted_at == oldest.updated_at
    assert (at_end.projects.delisted, at_end.projects.overdue, at_end.projects.held_back) == (6, 6, 4)
    with pytest.raises(ValueError, match="another cutoff"):
        measure_backlog(Session(), cutoff=CUTOFF + timedelta(seconds=1), within_window_from=at_start)


@pytest.mark.parametrize(
    ("batch_size", "max_batches"),
    [
        (100, 100),  # both phases run dry in one batch each
        (3, 3),  # phase A exactly fills the run: no projects, yet purgeable ones are left
        (3, 4),  # phase A ends on an empty batch; phase B gets one batch and leaves one project
        (2, 5),  # phase A runs dry on the last batch the run allows: phase B gets none
        (2, 3),  # phase A stops with overdue objects left
        (5, 3),  # phase B runs dry on a short batch
        (4, 4),  # phase B fills the run exactly and leaves nothing
        (1, 1),
    ],
)
def test_the_preview_agrees_with_what_a_real_run_then_does(batch_size, max_batches):
    catalog()
    cutoff = compute_cutoff(Session(), RETENTION, NOW)
    counted = measure_backlog(Session(), cutoff=cutoff)
    held_back_after_overdue_objects = held_back_now_and_after(Session(), cutoff=cutoff)[1]
    preview = preview_run(
        backlog=counted, held_back_after_overdue_objects=held_back_after_overdue_objects,
        batch_size=batch_size, max_batches=max_batches,
    )
    held_back, exact = held_back_after_run(preview, counted, held_back_after_overdue_objects)  # the admin page's

    real = purge(now=NOW, retention=RETENTION, batch_size=batch_size, max_batches=max_batches)

    compared = ("deleted_property_object_cards", "deleted_project_cards", "batches_processed", "has_more")
    assert {field: preview[field] for field in compared} == {field: getattr(real, field) for field in compared}
    if exact:
        assert held_back == real.projects_held_back
    else:
        assert 2 <= real.projects_held_back <= held_back


def test_the_oldest_overdue_card_is_past_the_cutoff_by_its_age_and_zero_without_one():
    PropertyObjectCardFactory(status=CardStatus.DELISTED, updated_at=LONG_AGO)
    ProjectCardFactory(status=CardStatus.DELISTED, updated_at=RECENTLY)

    backlog = measure_backlog(Session(), cutoff=CUTOFF)

    assert backlog.property_objects.days_past_due(CUTOFF) == 10
    assert backlog.projects.days_past_due(CUTOFF) == 0  # Delisted, not yet overdue


def test_held_back_after_some_objects_counts_the_projects_holding_an_object_the_run_does_not_reach():
    catalog()
    overdue_objects = list(
        PropertyObjectCard.objects.filter(status=CardStatus.DELISTED, updated_at__lt=CUTOFF)
        .order_by("updated_at", "id")
    )
    overdue_projects = {project_id for project_id in ProjectCard.objects.filter(
        status=CardStatus.DELISTED, updated_at__lt=CUTOFF).values_list("id", flat=True)}

    for objects in range(len(overdue_objects) + 2):
        taken = {card.id for card in overdue_objects[:objects]}
        expected = len({card.project_id for card in PropertyObjectCard.objects.all()
                        if card.project_id in overdue_projects and card.id not in taken})
        assert held_back_after(cutoff=CUTOFF, objects=objects) == expected, objects
    all_of_them = held_back_after(cutoff=CUTOFF, objects=len(overdue_objects))
    assert held_back_now_and_after(Session(), cutoff=CUTOFF)[1] == all_of_them == 2

"""The domain operations that stand in for the source-event consumers."""

import uuid
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from catalog.models import CardStatus, ProjectCard, PropertyObjectCard
from catalog.operations import (
    ProjectCardNotFound,
    UpsertOutcome,
    delist_project,
    delist_property_object,
    upsert_project,
    upsert_property_object,
)
from tests.support import held_in_another_transaction
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory

pytestmark = pytest.mark.django_db

LONG_AGO = timezone.now() - timedelta(days=45)


def test_upsert_project_creates_then_updates():
    project_id, developer_id = uuid.uuid4(), uuid.uuid4()

    assert upsert_project(project_id=project_id, developer_id=developer_id, title="Sunrise") == UpsertOutcome.CREATED
    assert upsert_project(
        project_id=project_id, developer_id=developer_id, title="Sunrise 2", status=CardStatus.HIDDEN
    ) == UpsertOutcome.UPDATED

    card = ProjectCard.objects.get(id=project_id)
    assert (card.title, card.status) == ("Sunrise 2", CardStatus.HIDDEN)


def test_upsert_restores_a_delisted_project_to_published():
    project = ProjectCardFactory(status=CardStatus.DELISTED, updated_at=LONG_AGO)

    outcome = upsert_project(project_id=project.id, developer_id=project.developer_id, title=project.title)

    assert outcome == UpsertOutcome.RESTORED
    card = ProjectCard.objects.get(id=project.id)
    assert card.status == CardStatus.PUBLISHED and card.updated_at > LONG_AGO


def test_upsert_property_object_creates_updates_and_restores():
    project = ProjectCardFactory()
    object_id = uuid.uuid4()

    assert upsert_property_object(object_id=object_id, project_id=project.id, title="Flat 1") == UpsertOutcome.CREATED
    assert upsert_property_object(
        object_id=object_id, project_id=project.id, title="Flat 1", price=100
    ) == UpsertOutcome.UPDATED
    PropertyObjectCard.objects.filter(id=object_id).update(status=CardStatus.DELISTED, updated_at=LONG_AGO)
    assert upsert_property_object(object_id=object_id, project_id=project.id, title="Flat 1") == UpsertOutcome.RESTORED

    assert PropertyObjectCard.objects.get(id=object_id).status == CardStatus.PUBLISHED


def test_upsert_property_object_under_a_missing_project_is_refused():
    with pytest.raises(ProjectCardNotFound):
        upsert_property_object(object_id=uuid.uuid4(), project_id=uuid.uuid4(), title="Flat")
    assert not PropertyObjectCard.objects.exists()


def test_upsert_cannot_set_delisted():
    with pytest.raises(ValueError, match="Published or Hidden"):
        upsert_project(project_id=uuid.uuid4(), developer_id=uuid.uuid4(), title="x", status=CardStatus.DELISTED)


def test_delisting_a_property_object_freezes_it():
    card = PropertyObjectCardFactory()

    assert delist_property_object(object_id=card.id) is True
    delisted = PropertyObjectCard.objects.get(id=card.id)
    assert delisted.status == CardStatus.DELISTED

    assert delist_property_object(object_id=card.id) is False  # a second delist must not reset the clock
    assert PropertyObjectCard.objects.get(id=card.id).updated_at == delisted.updated_at


def test_delisting_a_project_cascades_to_its_objects_with_one_updated_at():
    project = ProjectCardFactory()
    live = PropertyObjectCardFactory.create_batch(3, project_id=project.id)
    hidden = PropertyObjectCardFactory(project_id=project.id, status=CardStatus.HIDDEN)
    earlier = PropertyObjectCardFactory(project_id=project.id, status=CardStatus.DELISTED, updated_at=LONG_AGO)
    elsewhere = PropertyObjectCardFactory()

    assert delist_project(project_id=project.id) == 4

    delisted_project = ProjectCard.objects.get(id=project.id)
    assert delisted_project.status == CardStatus.DELISTED
    cascaded = PropertyObjectCard.objects.filter(id__in=[c.id for c in [*live, hidden]])
    assert {(c.status, c.updated_at) for c in cascaded} == {(CardStatus.DELISTED, delisted_project.updated_at)}
    assert PropertyObjectCard.objects.get(id=earlier.id).updated_at == LONG_AGO  # INV-7: frozen stays frozen
    assert PropertyObjectCard.objects.get(id=elsewhere.id).status == CardStatus.PUBLISHED
    assert delist_project(project_id=project.id) is None


@pytest.mark.django_db(transaction=True)
def test_object_upsert_holds_its_project_so_a_purge_cannot_lock_it():
    project = ProjectCardFactory(status=CardStatus.DELISTED, updated_at=LONG_AGO)
    new_object = {"object_id": uuid.uuid4(), "project_id": project.id, "title": "Flat"}

    with held_in_another_transaction(lambda: upsert_property_object(**new_object)), transaction.atomic():
        locked = list(ProjectCard.objects.select_for_update(skip_locked=True).filter(id=project.id))

    assert locked == []

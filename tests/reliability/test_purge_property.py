"""Property: on any catalog, one complete run deletes exactly the cards that are Delisted with updated_at before
the cutoff, except projects held back by a property-object card that remains — nothing more, nothing less —
together with exactly their display overrides, live or soft-deleted, and never a ranking rule.

Ages are drawn around the cutoff down to the microsecond (updated_at == cutoff is not overdue)."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from catalog.models import (
    BuildingDisplayOverride,
    CardStatus,
    DeveloperRankingRule,
    ProjectCard,
    PropertyObjectCard,
    PropertyObjectDisplayOverride,
)
from tests.support import CATALOG_TABLES, purge
from tests.reliability.support import CatalogState, execute

pytestmark = pytest.mark.django_db

NOW = datetime(2030, 6, 1, 0, 30, tzinfo=UTC)
RETENTION = timedelta(days=30)
CUTOFF = NOW - RETENTION
AGES_AROUND_CUTOFF = [
    timedelta(days=-400), timedelta(seconds=-1), timedelta(microseconds=-1), timedelta(0),
    timedelta(microseconds=1), timedelta(days=1), timedelta(days=29, hours=23),
]

cards = st.fixed_dictionaries(
    {
        "status": st.sampled_from(list(CardStatus)),
        "updated_at": st.sampled_from(AGES_AROUND_CUTOFF).map(lambda age: CUTOFF + age),
        # One flag per override: soft-deleted or live.
        "overrides": st.lists(st.booleans(), max_size=2),
    }
)
projects = st.fixed_dictionaries({"card": cards, "objects": st.lists(cards, max_size=4)})


def overdue(card: dict) -> bool:
    return card["status"] == CardStatus.DELISTED and card["updated_at"] < CUTOFF


def create_catalog(drawn_projects: list[dict]) -> tuple[set, set]:
    """Insert the drawn catalog; return the ids the run must delete: (property objects, projects)."""
    project_rows, object_rows, object_overrides, building_overrides = [], [], [], []
    expected_objects, expected_projects = set(), set()
    for project in drawn_projects:
        project_id = uuid.uuid4()
        project_rows.append(
            ProjectCard(
                id=project_id, developer_id=uuid.uuid4(), title="complex",
                status=project["card"]["status"], updated_at=project["card"]["updated_at"],
            )
        )
        building_overrides += [
            BuildingDisplayOverride(project_id=project_id, field="name", is_deleted=is_deleted)
            for is_deleted in project["card"]["overrides"]
        ]
        for drawn_object in project["objects"]:
            object_id = uuid.uuid4()
            object_rows.append(
                PropertyObjectCard(
                    id=object_id, project_id=project_id, title="flat",
                    status=drawn_object["status"], updated_at=drawn_object["updated_at"],
                )
            )
            object_overrides += [
                PropertyObjectDisplayOverride(property_object_id=object_id, field="price", is_deleted=is_deleted)
                for is_deleted in drawn_object["overrides"]
            ]
            if overdue(drawn_object):
                expected_objects.add(object_id)
        held_back = any(not overdue(drawn_object) for drawn_object in project["objects"])
        if overdue(project["card"]) and not held_back:
            expected_projects.add(project_id)
    ProjectCard.objects.bulk_create(project_rows)
    PropertyObjectCard.objects.bulk_create(object_rows)
    PropertyObjectDisplayOverride.objects.bulk_create(object_overrides)
    BuildingDisplayOverride.objects.bulk_create(building_overrides)
    DeveloperRankingRule.objects.bulk_create(
        [DeveloperRankingRule(developer_id=uuid.uuid4(), project_id=project.id, weight=1) for project in project_rows]
    )
    return expected_objects, expected_projects


def every_status_and_age() -> list[dict]:
    return [
        {"status": status, "updated_at": CUTOFF + age, "overrides": [False, True]}
        for status in CardStatus
        for age in AGES_AROUND_CUTOFF
    ]


def long_delisted() -> dict:
    return {"status": CardStatus.DELISTED, "updated_at": CUTOFF + AGES_AROUND_CUTOFF[0], "overrides": [True]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(drawn_projects=st.lists(projects, max_size=6), batch_size=st.integers(min_value=1, max_value=4))
# Always tried as well: every status at every age, alone and as the objects of an overdue project.
@example(
    drawn_projects=[
        *({"card": card, "objects": []} for card in every_status_and_age()),
        {"card": long_delisted(), "objects": every_status_and_age()},
        {"card": long_delisted(), "objects": [long_delisted()]},
    ],
    batch_size=3,
)
def test_one_complete_run_deletes_exactly_the_overdue_cards_not_held_back(drawn_projects, batch_size):
    execute(f"TRUNCATE {CATALOG_TABLES}")
    expected_objects, expected_projects = create_catalog(drawn_projects)
    before = CatalogState.read()
    rules_before = list(DeveloperRankingRule.objects.values_list("id", "project_id", "weight", "updated_at"))

    result = purge(
        retention=RETENTION, batch_size=batch_size, max_batches=1000, max_duration=timedelta(minutes=5), now=NOW
    )

    after = CatalogState.read()
    assert before.property_objects - after.property_objects == expected_objects
    assert before.projects - after.projects == expected_projects
    after.assert_whole_batches_since(before)
    assert list(DeveloperRankingRule.objects.values_list("id", "project_id", "weight", "updated_at")) == rules_before
    assert (result.deleted_property_object_cards, result.deleted_project_cards) == (
        len(expected_objects), len(expected_projects)
    )
    assert result.deleted_overrides == (
        len(before.property_object_overrides - after.property_object_overrides)
        + len(before.building_overrides - after.building_overrides)
    )
    assert result.has_more is False

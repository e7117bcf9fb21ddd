"""On the demo catalog, one run deletes exactly the overdue Delisted cards and their overrides: nothing else."""

from datetime import timedelta

import pytest
from django.db import connection

from catalog.demo_data import seed_demo_data
from tests.support import purge

pytestmark = pytest.mark.django_db

ALL_ROWS = """
SELECT 'project', id::text FROM catalog.project_cards
UNION ALL SELECT 'object', id::text FROM catalog.property_object_cards
UNION ALL SELECT 'object override', id::text FROM catalog.property_object_display_overrides
UNION ALL SELECT 'building override', id::text FROM catalog.building_display_overrides
UNION ALL SELECT 'ranking rule', id::text || ':' || weight FROM catalog.ranking_rules
"""

OVERDUE_ROWS = """
WITH objects AS (
    SELECT id FROM catalog.property_object_cards WHERE status = 'Delisted' AND updated_at < %(cutoff)s
), projects AS (
    SELECT p.id FROM catalog.project_cards AS p
     WHERE p.status = 'Delisted' AND p.updated_at < %(cutoff)s
       AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS o
                        WHERE o.project_id = p.id AND o.id NOT IN (SELECT id FROM objects))
)
SELECT 'project', id::text FROM projects
UNION ALL SELECT 'object', id::text FROM objects
UNION ALL SELECT 'object override', id::text FROM catalog.property_object_display_overrides
           WHERE property_object_id IN (SELECT id FROM objects)
UNION ALL SELECT 'building override', id::text FROM catalog.building_display_overrides
           WHERE project_id IN (SELECT id FROM projects)
"""


def rows(query, params=None) -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return set(cursor.fetchall())


def test_a_run_on_demo_data_deletes_exactly_the_overdue_cards_and_their_overrides():
    seed_demo_data(projects=60, objects_per_project=12, reset=True, seed=7)
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - interval '30 days'")
        cutoff = cursor.fetchone()[0]
    before = rows(ALL_ROWS)
    expected_deleted = rows(OVERDUE_ROWS, {"cutoff": cutoff})
    assert {kind for kind, _ in expected_deleted} == {"project", "object", "object override", "building override"}

    result = purge(retention=timedelta(days=30), batch_size=50)

    assert result.cutoff == cutoff  # the test's transaction: the same now()
    assert before - rows(ALL_ROWS) == expected_deleted
    assert result.has_more is False and result.projects_held_back == 0
    assert result.deleted_property_object_cards == sum(kind == "object" for kind, _ in expected_deleted)

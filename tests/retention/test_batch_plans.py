"""The batch SELECTs read the partial indexes `(updated_at, id) WHERE status = 'Delisted'`: that is what keeps a
batch at O(batch) instead of O(table) (docs/benchmarks.md, section 2). Checked on the plan, not on the clock:
EXPLAIN (FORMAT JSON) of the exact SQL the job runs, on a demo catalog with fresh statistics."""

import pytest
from django.db import connection

from catalog.demo_data import seed_demo_data
from retention.service import PROJECTS, PROPERTY_OBJECTS

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_catalog():
    # 1,000 projects (30,000 property objects): on a toy table of a few hundred projects a sequential scan is the
    # planner's right answer, and a test of that would prove nothing about a production catalog.
    seed_demo_data(projects=1000, objects_per_project=30, reset=True, seed=3)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE catalog.project_cards, catalog.property_object_cards")


def batch_plan_nodes(phase) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - interval '30 days'")
        cutoff = cursor.fetchone()[0]
        params = {"cutoff": cutoff, "batch_size": 2000, "only_ids": None, "skipped_ids": "{}"}
        cursor.execute(f"EXPLAIN (FORMAT JSON) {phase.lock_batch}", params)
        return list(walk(cursor.fetchone()[0][0]["Plan"]))


def walk(node: dict):
    yield node
    for child in node.get("Plans", []):
        yield from walk(child)


@pytest.mark.parametrize(
    "phase, table, partial_index",
    [
        (PROPERTY_OBJECTS, "property_object_cards", "property_object_cards_delisted_updated_at_idx"),
        (PROJECTS, "project_cards", "project_cards_delisted_updated_at_idx"),
    ],
    ids=["property_objects", "projects"],
)
def test_the_batch_select_of_each_phase_reads_its_partial_index_not_the_whole_table(
    demo_catalog, phase, table, partial_index
):
    nodes = batch_plan_nodes(phase)

    assert any(node.get("Index Name") == partial_index for node in nodes), nodes
    assert not any(node["Node Type"] == "Seq Scan" and node.get("Relation Name") == table for node in nodes), nodes

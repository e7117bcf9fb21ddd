"""The batch SELECTs read the partial indexes `(updated_at, id) WHERE status = 'Delisted'`, and the orphan sweep
the overrides' `(created_at, id)` indexes: that is what keeps a batch at O(batch) instead of O(table)
(docs/benchmarks.md, section 2). A run's end count reads only the overdue entries of the partial indexes. Checked on
the plan, not on the clock: EXPLAIN (FORMAT JSON) of the exact SQL the job runs, on a demo catalog with fresh
statistics."""

from datetime import datetime, timedelta

import pytest
from django.db import connection

from catalog.demo_data import seed_demo_data
from retention.backlog import COUNT_CHUNK, measure_backlog
from retention.phases import (
    ORPHAN_BUILDING_OVERRIDES, ORPHAN_OBJECT_OVERRIDES, SCAN_CHUNK, PROJECTS, PROPERTY_OBJECTS,
)
from retention.session import Session
from retention.statements import STATEMENTS

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_catalog():
    # 1,000 projects (30,000 property objects): on a toy table of a few hundred projects a sequential scan is the
    # planner's right answer, and a test of that would prove nothing about a production catalog.
    seed_demo_data(projects=1000, objects_per_project=30, reset=True, seed=3)
    with connection.cursor() as cursor:
        cursor.execute(
            "ANALYZE catalog.project_cards, catalog.property_object_cards,"
            " catalog.property_object_display_overrides, catalog.building_display_overrides"
        )


def database_cutoff() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - interval '30 days'")
        return cursor.fetchone()[0]


def plan_nodes(statement: str, params: dict, *, analyze: bool = False) -> list[dict]:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ({'ANALYZE, ' if analyze else ''}FORMAT JSON) {statement}", params)
        return list(walk(cursor.fetchone()[0][0]["Plan"]))


def batch_plan_nodes(phase, after: tuple | None = None) -> list[dict]:
    after_at, after_id = after or phase.first_key
    params = {"cutoff": database_cutoff(), "batch_size": 2000, "only_ids": None, "skipped_ids": "{}",
              "after_at": after_at, "after_id": after_id}
    return plan_nodes(phase.batch_sql, params)


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


def test_the_batch_deletes_its_cards_by_a_tid_scan_of_the_addresses_it_locked(demo_catalog):
    # Naming each row's table beside its address (a partition's ctid is its own) keeps the TID scan on a plain table,
    # the one-shot study's fastest batched shape (docs/benchmarks.md, "What the one-shot buys"), and the check of
    # the pair is never run there. (The demo's few overdue projects are rightly read from their partial index.)
    nodes = plan_nodes(PROPERTY_OBJECTS.batch_sql, {
        "cutoff": database_cutoff(), "batch_size": 2000, "only_ids": None, "skipped_ids": "{}",
        "after_at": PROPERTY_OBJECTS.first_key[0], "after_id": PROPERTY_OBJECTS.first_key[1],
    }, analyze=True)
    [delete] = [node for node in nodes
                if node["Node Type"] == "ModifyTable" and node.get("Relation Name") == "property_object_cards"]
    scans = [node for node in walk(delete)
             if node.get("Relation Name") == "property_object_cards" and "Scan" in node["Node Type"]]
    pair_checks = [node for node in walk(delete) if node.get("Subplan Name", "").startswith("SubPlan")]

    assert [scan["Node Type"] for scan in scans] == ["Tid Scan"], scans
    assert scans[0]["Actual Rows"] > 0 and [check["Actual Loops"] for check in pair_checks] == [0], pair_checks


def test_a_batch_starts_its_index_scan_after_the_last_card_of_the_batch_before(demo_catalog):
    # Not at the first overdue entry: the entries of the cards the batches before it deleted are dead, and each batch
    # reading all of them again cost a run of 400,000 cards a fifth of its time (docs/benchmark-findings.md).
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT updated_at, id FROM catalog.property_object_cards WHERE status = 'Delisted'"
            " ORDER BY updated_at, id OFFSET 100 LIMIT 1"
        )
        after = cursor.fetchone()

    [scan] = [node for node in batch_plan_nodes(PROPERTY_OBJECTS, after)
              if node.get("Index Name") == "property_object_cards_delisted_updated_at_idx"]

    assert "ROW(updated_at, id) > ROW(" in scan["Index Cond"], scan


@pytest.fixture
def every_override_recent(demo_catalog):
    """Every override written within the sweep's window: the volume at which a NOT EXISTS over all of them plans
    as a hash anti-join that reads every card (1.8 s at 2M cards, docs/benchmark-findings.md)."""
    with connection.cursor() as cursor:
        for overrides in ("property_object_display_overrides", "building_display_overrides"):
            cursor.execute(f"UPDATE catalog.{overrides} SET created_at = now() - random() * interval '6 days'")
            cursor.execute(f"ANALYZE catalog.{overrides}")


@pytest.mark.parametrize(
    "phase, overrides, card_table, created_at_index, card_key_index",
    [
        (ORPHAN_OBJECT_OVERRIDES, "property_object_display_overrides", "property_object_cards",
         "property_object_display_overrides_created_at_idx", "property_object_cards_pkey"),
        (ORPHAN_BUILDING_OVERRIDES, "building_display_overrides", "project_cards",
         "building_display_overrides_created_at_idx", "project_cards_pkey"),
    ],
    ids=["property_object_overrides", "building_overrides"],
)
def test_an_orphan_scan_chunk_reads_its_overrides_by_index_and_probes_each_card_by_key(
    every_override_recent, phase, overrides, card_table, created_at_index, card_key_index
):
    params = {"orphan_sweep_window": timedelta(days=7), "after_at": "-infinity", "after_id": 0,
              "chunk": SCAN_CHUNK}
    nodes = plan_nodes(phase.scan_sql, params, analyze=True)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM catalog.{overrides}")
        (recent,) = cursor.fetchone()

    assert recent > 500
    if recent > 4 * SCAN_CHUNK:  # a table of a few chunks is read whole and sorted, and rightly so
        assert any(node.get("Index Name") == created_at_index for node in nodes), nodes
    assert not any(node["Node Type"] in ("Seq Scan", "Bitmap Heap Scan") and node.get("Relation Name") == card_table
                   for node in nodes), nodes
    assert not any(node["Node Type"] == "Hash" for node in nodes), nodes
    # One probe of the card key per override of the chunk: the cost of a chunk is its overrides, not the cards.
    probes = [node for node in nodes if node.get("Index Name") == card_key_index]
    assert [node["Actual Loops"] for node in probes] == [min(recent, SCAN_CHUNK)], probes


def rows_read_from(index: str, nodes: list[dict]) -> int:
    return max(node["Actual Rows"] * node["Actual Loops"] for node in nodes if node.get("Index Name") == index)


@pytest.mark.parametrize("count", ["start", "end"])
def test_the_end_count_reads_only_the_overdue_entries_of_the_partial_indexes(demo_catalog, count):
    cutoff = database_cutoff()
    backlog = measure_backlog(Session(), cutoff=cutoff)
    params = {"cutoff": cutoff, "count_within_window": count == "start", "after": "-infinity", "chunk": COUNT_CHUNK,
              "until": "infinity"}

    read = tuple(
        rows_read_from(f"{cards}_delisted_updated_at_idx",
                       plan_nodes(STATEMENTS[f"backlog: {cards}, in chunks"], params, analyze=True))
        for cards in ("property_object_cards", "project_cards")
    )

    assert backlog.property_objects.delisted < COUNT_CHUNK  # one chunk per kind: its reads are the whole count's
    assert backlog.property_objects.overdue < backlog.property_objects.delisted
    assert backlog.projects.overdue < backlog.projects.delisted
    expected = "delisted" if count == "start" else "overdue"
    assert read == (getattr(backlog.property_objects, expected), getattr(backlog.projects, expected))


@pytest.fixture
def overrides_over_a_year():
    """100,000 overrides written evenly over a year, 2 % of them within the sweep's 7-day window."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO catalog.property_object_display_overrides
                   (property_object_id, field, value, is_deleted, created_at, updated_at)
            SELECT gen_random_uuid(), 'title', '"x"', false, moment, moment
              FROM (SELECT now() - (i / 100000.0) * interval '365 days' AS moment
                      FROM generate_series(1, 100000) AS i) AS spread;
            ANALYZE catalog.property_object_display_overrides;
            """
        )


def test_the_orphan_sweeps_first_chunk_starts_at_the_window_not_at_the_oldest_override(overrides_over_a_year):
    params = {"orphan_sweep_window": timedelta(days=7), "after_at": "-infinity", "after_id": 0, "chunk": SCAN_CHUNK}
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {ORPHAN_OBJECT_OVERRIDES.scan_sql}", params)
        nodes = list(walk(cursor.fetchone()[0][0]["Plan"]))
    [scan] = [node for node in nodes if node.get("Index Name") == "property_object_display_overrides_created_at_idx"]

    # The chunk's 500 entries and their rows: a few pages of the index and the heap. Starting at the oldest
    # override, the scan read the index entries of the 98,000 overrides before the window too.
    assert scan["Shared Hit Blocks"] + scan["Shared Read Blocks"] < 100, scan  # 12 here; 683 from the oldest

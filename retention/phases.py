"""The four phases of a run, in the order it runs them, each with the SQL that locks a batch and the SQL that deletes
it; and beside them the dry run's SQL, which counts what those statements would take (retention.preview).

The rule that leaves no property object dangling, a project held back while a property-object card of its is left, is
written once (HELD_BACK_BY) and formatted into every statement that applies it: the project batches, the backlog count
(retention.backlog) and the dry run.
"""

from dataclasses import dataclass

# A project (`card`) is held back while a property-object card of its is left; `{left}` says which objects count.
HELD_BACK_BY = "EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND {left})"
# In the batches and the backlog count every object there is counts: a deleted one is gone.
HELD_BACK = HELD_BACK_BY.format(left="true")
# The objects a run reaching the `objects` oldest overdue ones takes, in the batches' order (updated_at, id): the
# overdue ones before the keyset boundary `kept_from`, the first overdue object it leaves, which FIRST_OBJECT_KEPT finds
# through the partial index (updated_at, id) WHERE status = 'Delisted'. A run that leaves none (kept_from NULL) takes
# every overdue object: the planner then drops the comparison, and the held-back probe reads (project_id, status,
# updated_at) from its index alone, as the admin page needs.
OBJECT_TAKEN = """po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                 AND (%(kept_from_at)s::timestamptz IS NULL
                      OR (po.updated_at, po.id) < (%(kept_from_at)s, %(kept_from_id)s::uuid))"""
HELD_BACK_AFTER_TAKEN = HELD_BACK_BY.format(left=f"NOT ({OBJECT_TAKEN})")


@dataclass(frozen=True)
class Phase:
    """One kind of row the job deletes, in batches: the SQL that locks a batch and the SQL that deletes it."""

    name: str
    lock_sql: str
    delete_sql: str
    deleted_overrides: str  # the PurgeResult field its overrides count into
    deleted_cards: str | None  # the PurgeResult field its cards count into; None: it deletes overrides only


# Parameters: cutoff, batch_size, only_ids (NULL, or the ids of a failed batch being redone), skipped_ids (culprits
# of this run), orphan_sweep_window (the orphan phases). Ids and row addresses come back as one array text value
# each, not thousands of values to adapt.
PROPERTY_OBJECTS = Phase(
    name="property_objects",
    lock_sql="""
        SELECT count(*), array_agg(id)::text, array_agg(ctid)::text
          FROM (SELECT id, ctid FROM catalog.property_object_cards
                 WHERE status = 'Delisted' AND updated_at < %(cutoff)s
                   AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
                   AND id <> ALL(%(skipped_ids)s::uuid[])
                 ORDER BY updated_at, id
                 LIMIT %(batch_size)s
                 FOR UPDATE SKIP LOCKED) AS batch
    """,
    delete_sql="""
        WITH deleted_cards AS (
            DELETE FROM catalog.property_object_cards AS card
             WHERE card.ctid = ANY(%(row_addresses)s::tid[])
               AND card.status = 'Delisted' AND card.updated_at < %(cutoff)s
            RETURNING card.id
        ), deleted_overrides AS (
            DELETE FROM catalog.property_object_display_overrides
             WHERE property_object_id IN (SELECT id FROM deleted_cards)
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM deleted_cards), (SELECT count(*) FROM deleted_overrides)
    """,
    deleted_cards="deleted_property_object_cards",
    deleted_overrides="deleted_property_object_overrides",
)
PROJECTS = Phase(
    name="projects",
    lock_sql=f"""
        SELECT count(*), array_agg(id)::text, array_agg(ctid)::text
          FROM (SELECT id, ctid FROM catalog.project_cards AS card
                 WHERE status = 'Delisted' AND updated_at < %(cutoff)s
                   AND NOT {HELD_BACK}
                   AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
                   AND id <> ALL(%(skipped_ids)s::uuid[])
                 ORDER BY updated_at, id
                 LIMIT %(batch_size)s
                 FOR UPDATE SKIP LOCKED) AS batch
    """,
    # A new statement, so a new snapshot: it sees any object committed before the project rows were locked.
    delete_sql=f"""
        WITH deleted_cards AS (
            DELETE FROM catalog.project_cards AS card
             WHERE card.ctid = ANY(%(row_addresses)s::tid[])
               AND card.status = 'Delisted' AND card.updated_at < %(cutoff)s
               AND NOT {HELD_BACK}
            RETURNING card.id
        ), deleted_overrides AS (
            DELETE FROM catalog.building_display_overrides
             WHERE project_id IN (SELECT id FROM deleted_cards)
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM deleted_cards), (SELECT count(*) FROM deleted_overrides)
    """,
    deleted_cards="deleted_project_cards",
    deleted_overrides="deleted_building_overrides",
)
# Overrides whose card is gone: left by a writer outside catalog.operations' protocol, which locks the card
# FOR KEY SHARE and refuses a gone one. The job's own batches delete a card's overrides with it. Only overrides
# written within orphan_sweep_window are looked at, through the (created_at, id) indexes: an orphan is written
# while or after its card is deleted, and a look at every override would read the whole card table every night
# (docs/benchmark-findings.md, "What the first 10M runs changed"). Older orphans: one run with a wide
# --orphan-sweep-days.
ORPHAN_OBJECT_OVERRIDES = Phase(
    name="orphan_property_object_overrides",
    lock_sql="""
        SELECT count(*), array_agg(id)::text, array_agg(ctid)::text
          FROM (SELECT id, ctid FROM catalog.property_object_display_overrides AS override
                 WHERE created_at >= now() - %(orphan_sweep_window)s
                   AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card
                                    WHERE card.id = override.property_object_id)
                   AND (%(only_ids)s::bigint[] IS NULL OR id = ANY(%(only_ids)s::bigint[]))
                   AND id::text <> ALL(%(skipped_ids)s::text[])
                 ORDER BY created_at, id
                 LIMIT %(batch_size)s
                 FOR UPDATE SKIP LOCKED) AS batch
    """,
    delete_sql="""
        WITH deleted_overrides AS (
            DELETE FROM catalog.property_object_display_overrides AS override
             WHERE override.ctid = ANY(%(row_addresses)s::tid[])
               AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card
                                WHERE card.id = override.property_object_id)
            RETURNING 1
        )
        SELECT 0, (SELECT count(*) FROM deleted_overrides)
    """,
    deleted_cards=None,
    deleted_overrides="deleted_property_object_overrides",
)
ORPHAN_BUILDING_OVERRIDES = Phase(
    name="orphan_building_overrides",
    lock_sql="""
        SELECT count(*), array_agg(id)::text, array_agg(ctid)::text
          FROM (SELECT id, ctid FROM catalog.building_display_overrides AS override
                 WHERE created_at >= now() - %(orphan_sweep_window)s
                   AND NOT EXISTS (SELECT FROM catalog.project_cards AS card WHERE card.id = override.project_id)
                   AND (%(only_ids)s::bigint[] IS NULL OR id = ANY(%(only_ids)s::bigint[]))
                   AND id::text <> ALL(%(skipped_ids)s::text[])
                 ORDER BY created_at, id
                 LIMIT %(batch_size)s
                 FOR UPDATE SKIP LOCKED) AS batch
    """,
    delete_sql="""
        WITH deleted_overrides AS (
            DELETE FROM catalog.building_display_overrides AS override
             WHERE override.ctid = ANY(%(row_addresses)s::tid[])
               AND NOT EXISTS (SELECT FROM catalog.project_cards AS card WHERE card.id = override.project_id)
            RETURNING 1
        )
        SELECT 0, (SELECT count(*) FROM deleted_overrides)
    """,
    deleted_cards=None,
    deleted_overrides="deleted_building_overrides",
)
# The orphans first, oldest first: a run stopped on its limits in the card phases has then looked at every orphan
# within the window, so none outlives the sweep while runs come more often than the window. Orphans are rare (a
# writer outside the protocol); a flood of them costs batches the card phases wait for, and shows as has_more and
# the backlog's age, where orphans left behind would show nowhere.
PHASES = (ORPHAN_OBJECT_OVERRIDES, ORPHAN_BUILDING_OVERRIDES, PROPERTY_OBJECTS, PROJECTS)
CARD_PHASES = (PROPERTY_OBJECTS, PROJECTS)


# The dry run's SQL (retention.preview). Parameters: cutoff; objects, how many overdue objects the run reaches;
# kept_from_at and kept_from_id, the boundary; projects, how many projects it deletes.
FIRST_OBJECT_KEPT = """
SELECT updated_at, id::text FROM catalog.property_object_cards
 WHERE status = 'Delisted' AND updated_at < %(cutoff)s
 ORDER BY updated_at, id
 OFFSET %(objects)s LIMIT 1
"""
# The overdue projects still held back once the objects taken are gone.
HELD_BACK_AFTER = f"""
SELECT count(*) FROM catalog.project_cards AS card
 WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND {HELD_BACK_AFTER_TAKEN}
"""
# The overrides of exactly the rows the real batches would take, in the same order.
OVERRIDES_OF_TAKEN = f"""
WITH taken_objects AS (
    SELECT id FROM catalog.property_object_cards AS po WHERE {OBJECT_TAKEN}
), taken_projects AS (
    SELECT id FROM catalog.project_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND NOT {HELD_BACK_AFTER_TAKEN}
     ORDER BY updated_at, id LIMIT %(projects)s
)
SELECT (SELECT count(*) FROM catalog.property_object_display_overrides
         WHERE property_object_id IN (SELECT id FROM taken_objects)),
       (SELECT count(*) FROM catalog.building_display_overrides WHERE project_id IN (SELECT id FROM taken_projects))
"""

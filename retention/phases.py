"""The four phases of a run, in the order it runs them, each with the SQL of its batches; and beside them the dry
run's SQL, which counts what those statements would take (retention.preview).

The rule that leaves no property object dangling, a project held back while a property-object card of its is left, is
written once (HELD_BACK_BY) and formatted into every statement that applies it: the project batches, the backlog count
(retention.backlog) and the dry run.
"""

from dataclasses import dataclass

from retention.locks import SESSION_MARKER

# A project (`card`) is held back while a property-object card of its is left; `{left}` says which objects count.
HELD_BACK_BY = "EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND {left})"
# In the batches and the backlog count every object there is counts: a deleted one is gone.
HELD_BACK = HELD_BACK_BY.format(left="true")
# The objects a run reaching the `objects` oldest overdue ones takes, in the batches' order (updated_at, id): the
# overdue ones before the keyset boundary `kept_from`, the first overdue object it leaves, which FIRST_OBJECT_KEPT finds
# through the partial index (updated_at, id) WHERE status = 'Delisted'. A run that leaves none (kept_from NULL) takes
# every overdue object, and the planner drops the comparison.
OBJECT_TAKEN = """po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                 AND (%(kept_from_at)s::timestamptz IS NULL
                      OR (po.updated_at, po.id) < (%(kept_from_at)s, %(kept_from_id)s::uuid))"""
# The objects such a run leaves, the complement of OBJECT_TAKEN, as ranges of the index (project_id, status,
# updated_at), read from the index alone: a probe per range goes straight to the objects left, where a probe for
# NOT (OBJECT_TAKEN) walked every taken object of the project (the admin page's held-back count,
# docs/benchmark-findings.md). Any other status is two ranges, as `<>` is none; a NULL boundary leaves no overdue
# object (the comparison is NULL).
OBJECTS_LEFT = (
    "po.status < 'Delisted'",
    "po.status > 'Delisted'",
    "po.status = 'Delisted' AND po.updated_at >= %(cutoff)s",
    """po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                 AND (po.updated_at, po.id) >= (%(kept_from_at)s, %(kept_from_id)s::uuid)""",
)
HELD_BACK_AFTER_TAKEN = "(" + "\n     OR ".join(HELD_BACK_BY.format(left=left) for left in OBJECTS_LEFT) + ")"


# Rows a candidate scan reads per statement: probing each one's card, or a project's objects, by key keeps a chunk
# at a few ms (docs/benchmark-findings.md).
SCAN_CHUNK = 500


@dataclass(frozen=True)
class Phase:
    """One kind of row the job deletes, in batches.

    `batch_sql` is a batch on the happy path, one statement: lock the batch FOR UPDATE SKIP LOCKED, delete it and
    its overrides, return the counts and the session it ran on. Only a batch that failed for a data reason is
    redone in parts, with `lock_sql` (its ids and row addresses) and `delete_sql` (a part, by row address).
    A batch resumes after the last row of the batch before the phase's previous one (after_at, after_id: the key
    a batch returns; `first_key`, before every row, at first). So it passes once over the index entries of the rows
    the previous batch deleted, while their pages are in memory, which marks them dead for the end count and the
    next run, and never over those of the batches before (docs/benchmark-findings.md). A row skipped because
    another transaction held it through two batches is left to the next run.
    `scan_sql` (projects, orphans) finds the candidates the batches take, in chunks of SCAN_CHUNK, outside any
    row-locking transaction: the probes that tell a candidate run there, and a batch re-checks only the candidates
    it locks. Its parameters: after_at and after_id (where the previous chunk ended; `first_key` at first), chunk,
    cutoff, orphan_sweep_window; its row: rows read, the candidates' ids (array text), the last row's key."""

    name: str
    lock_sql: str
    delete_sql: str
    batch_sql: str
    deleted_overrides: str  # the PurgeResult field its overrides count into
    deleted_cards: str | None  # the PurgeResult field its cards count into; None: it deletes overrides only
    first_key: tuple  # the key (moment, id) before every row of the phase
    scan_sql: str | None = None


# The statements of a phase are built from two parts: `select_batch`, the SELECT of a batch's rows (id, ctid and
# the `moment` of its key) with its ORDER BY and LIMIT, and `delete`, the DELETE ... RETURNING of the rows of the CTE
# `batch` with their overrides, ending in the CTE `deleted_overrides` and (card phases) `deleted_cards`. Parameters:
# cutoff, batch_size, after_at and after_id (the key the batch resumes after), only_ids (NULL, or the ids a batch is
# limited to: a scan's candidates), skipped_ids (culprits of this run); a part of a culprit search: row_addresses and
# ids. The row addresses (`ctid`) of locked rows cannot change while this transaction holds their row locks: no
# UPDATE or DELETE can touch them, and VACUUM never moves a live row. Every statement, rendered: retention/sql/.
def phase(name: str, *, select_batch: str, delete: str, moment: str, id_type: str, first_key: tuple,
          deleted_cards: str | None, deleted_overrides: str, scan_sql: str | None = None) -> Phase:
    counts = "(SELECT count(*) FROM deleted_cards)" if deleted_cards else "0"
    return Phase(
        name=name,
        # Ids and row addresses come back as one array text value each, not thousands of values to adapt.
        lock_sql=f"""
            SELECT count(*), array_agg(id)::text, array_agg(ctid)::text, pg_backend_pid(),
                   current_setting('{SESSION_MARKER}', true)
              FROM ({select_batch} FOR UPDATE SKIP LOCKED) AS batch
        """,
        delete_sql=f"""
            WITH batch AS (
                SELECT unnest(%(row_addresses)s::tid[]) AS ctid, unnest(%(ids)s::{id_type}[]) AS id
            ),
            {delete}
            SELECT {counts}, (SELECT count(*) FROM deleted_overrides)
        """,
        batch_sql=f"""
            WITH batch AS ({select_batch} FOR UPDATE SKIP LOCKED),
            {delete},
            last AS (
                SELECT {moment}, id FROM batch ORDER BY {moment} DESC, id DESC LIMIT 1
            )
            SELECT (SELECT count(*) FROM batch), {counts}, (SELECT count(*) FROM deleted_overrides),
                   pg_backend_pid(), current_setting('{SESSION_MARKER}', true),
                   (SELECT {moment} FROM last), (SELECT id FROM last)
        """,
        deleted_cards=deleted_cards,
        deleted_overrides=deleted_overrides,
        first_key=first_key,
        scan_sql=scan_sql,
    )


def after_key(moment: str, id_type: str, *, at: str = "%(after_at)s::timestamptz") -> str:
    """The rows after the key (`at`, after_id) in (moment, id) order: an index condition on (moment, id)."""
    return f"({moment}, id) > ({at}, %(after_id)s::{id_type})"


def overdue_cards(cards: str, *, held_back: bool = False) -> str:
    """The SELECT of a batch of overdue cards, oldest first; with `held_back`, none that the rule holds back."""
    return f"""
        SELECT id, ctid, updated_at FROM catalog.{cards} AS card
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s{f" AND NOT {HELD_BACK}" if held_back else ""}
           AND {after_key("updated_at", "uuid")}
           AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
           AND id <> ALL(%(skipped_ids)s::uuid[])
         ORDER BY updated_at, id
         LIMIT %(batch_size)s
    """


def delete_cards(cards: str, *, overrides: str, card_key: str, keep: str = "") -> str:
    """The DELETE of the cards at {row_addresses}, the predicate repeated as a guard, and of their overrides."""
    return f"""
        deleted_cards AS (
            DELETE FROM catalog.{cards} AS card
             WHERE card.ctid = ANY(ARRAY(SELECT ctid FROM batch))
               AND card.status = 'Delisted' AND card.updated_at < %(cutoff)s{keep}
            RETURNING card.id
        ), deleted_overrides AS (
            DELETE FROM catalog.{overrides}
             WHERE {card_key} = ANY(ARRAY(SELECT id FROM deleted_cards))
            RETURNING 1
        )
    """


def chunk_scan(*, table: str, columns: str, moment: str, id_type: str, within: str, candidates: str) -> str:
    """A candidate scan (Phase.scan_sql): the next chunk of `table`'s rows `within` (an index condition on (moment,
    id)), in (moment, id) order after (after_at, after_id); `candidates`, a FROM ... WHERE over the chunk, picks the
    ids it returns."""
    return f"""
        WITH chunk AS (
            SELECT {columns} FROM catalog.{table}
             WHERE {within}
             ORDER BY {moment}, id
             LIMIT %(chunk)s
        ), last AS (
            SELECT {moment}, id FROM chunk ORDER BY {moment} DESC, id DESC LIMIT 1
        )
        SELECT (SELECT count(*) FROM chunk),
               (SELECT array_agg(id ORDER BY {moment}, id)::text {candidates}),
               (SELECT {moment} FROM last), (SELECT id FROM last)
    """


BEFORE_EVERY_CARD = ("-infinity", "00000000-0000-0000-0000-000000000000")
PROPERTY_OBJECTS = phase(
    "property_objects",
    select_batch=overdue_cards("property_object_cards"),
    delete=delete_cards(
        "property_object_cards", overrides="property_object_display_overrides", card_key="property_object_id",
    ),
    moment="updated_at",
    id_type="uuid",
    first_key=BEFORE_EVERY_CARD,
    deleted_cards="deleted_property_object_cards",
    deleted_overrides="deleted_property_object_overrides",
)
# A project is deleted only once no property-object card is left under it. The DELETE re-checks that after the
# projects are locked, with catalog.projects_with_property_objects (migration catalog 0005): an object upsert holds
# its project FOR KEY SHARE, so once the project is locked no object can appear under it, and the function's fresh
# snapshot sees any that was committed before, even after this statement began (its argument, the batch's ids,
# is complete only once every row of the batch is locked).
# The first look at the overdue projects after the objects phase is the slow one (each probe visits the heap for every
# index entry of the objects just deleted, docs/benchmark-findings.md): the scan takes it, in chunks, outside the
# batches' row locks.
PROJECTS = phase(
    "projects",
    scan_sql=chunk_scan(
        table="project_cards", columns="updated_at, id", moment="updated_at", id_type="uuid",
        within=f"status = 'Delisted' AND updated_at < %(cutoff)s AND {after_key('updated_at', 'uuid')}",
        candidates=f"FROM chunk AS card WHERE NOT {HELD_BACK}",
    ),
    select_batch=overdue_cards("project_cards", held_back=True),
    delete="""
        holding AS (
            SELECT catalog.projects_with_property_objects(ARRAY(SELECT id FROM batch)) AS ids
        ),""" + delete_cards(
        "project_cards", overrides="building_display_overrides", card_key="project_id",
        keep="\n               AND card.id <> ALL((SELECT ids FROM holding)::uuid[])",
    ),
    moment="updated_at",
    id_type="uuid",
    first_key=BEFORE_EVERY_CARD,
    deleted_cards="deleted_project_cards",
    deleted_overrides="deleted_building_overrides",
)
# Overrides whose card is gone: left by a writer outside catalog.operations' protocol, which locks the card
# FOR KEY SHARE and refuses a gone one. The job's own batches delete a card's overrides with it. Only overrides
# written within orphan_sweep_window are looked at (an orphan is written while or after its card is deleted; older
# orphans: one run with a wide --orphan-sweep-days), and never in one statement: `scan_sql` reads them in chunks of
# SCAN_CHUNK in (created_at, id) order through the (created_at, id) index, outside any row-locking
# transaction, probing each one's card by its key (a LATERAL ... LIMIT 1 cannot become a hash join, which would
# read every card), and a batch then takes the candidates it found by id and checks them again under its locks.
def orphan_phase(name: str, *, overrides: str, cards: str, card_key: str, deleted_overrides: str) -> Phase:
    card_is_gone = f"NOT EXISTS (SELECT FROM catalog.{cards} AS card WHERE card.id = override.{card_key})"
    return phase(
        name,
        scan_sql=chunk_scan(
            table=overrides, columns=f"id, created_at, {card_key} AS card_id", moment="created_at", id_type="bigint",
            # The scan starts at the window, not at the oldest override: a first chunk reads only what it returns.
            within=after_key("created_at", "bigint", at="greatest(%(after_at)s::timestamptz, now() - %(orphan_sweep_window)s)"),
            candidates=f"""FROM chunk
                      LEFT JOIN LATERAL (SELECT true AS found FROM catalog.{cards} AS card
                                          WHERE card.id = chunk.card_id LIMIT 1) AS card ON true
                     WHERE card.found IS NULL""",
        ),
        select_batch=f"""
            SELECT id, ctid, created_at FROM catalog.{overrides} AS override
             WHERE id = ANY(%(only_ids)s::bigint[]) AND {card_is_gone} AND {after_key("created_at", "bigint")}
               AND id::text <> ALL(%(skipped_ids)s::text[])
             ORDER BY created_at, id
             LIMIT %(batch_size)s
        """,
        delete=f"""
            deleted_overrides AS (
                DELETE FROM catalog.{overrides} AS override
                 WHERE override.ctid = ANY(ARRAY(SELECT ctid FROM batch)) AND {card_is_gone}
                RETURNING 1
            )
        """,
        moment="created_at",
        id_type="bigint",
        first_key=("-infinity", 0),
        deleted_cards=None,
        deleted_overrides=deleted_overrides,
    )


ORPHAN_OBJECT_OVERRIDES = orphan_phase(
    "orphan_property_object_overrides", overrides="property_object_display_overrides",
    cards="property_object_cards", card_key="property_object_id",
    deleted_overrides="deleted_property_object_overrides",
)
ORPHAN_BUILDING_OVERRIDES = orphan_phase(
    "orphan_building_overrides", overrides="building_display_overrides", cards="project_cards",
    card_key="project_id", deleted_overrides="deleted_building_overrides",
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

"""The four phases of a run, in the order it runs them, each with the SQL of its batches; and beside them the dry
run's SQL, which counts what those statements would take (retention.preview). Every statement as it reaches the
server: retention/sql/statements.sql; why each is shaped so: docs/how-it-works.md, "The batches". The rule that leaves
no property object dangling is written once (HELD_BACK_BY) and formatted into every statement that applies it.
"""

import textwrap
from dataclasses import dataclass

from retention.locks import SESSION_MARKER

# A project (`card`) is held back while a property-object card of its is left; `{left}` says which objects count.
HELD_BACK_BY = "EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND {left})"
# In the batches and the backlog count every object there is counts: a deleted one is gone.
HELD_BACK = HELD_BACK_BY.format(left="true")
# The objects a run reaching the `objects` oldest overdue ones takes, in the batches' order: those before the first
# overdue object it leaves, `kept_from` (FIRST_OBJECT_KEPT; NULL: it takes every overdue object).
OBJECT_TAKEN = """po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                 AND (%(kept_from_at)s::timestamptz IS NULL
                      OR (po.updated_at, po.id) < (%(kept_from_at)s, %(kept_from_id)s::uuid))"""
# The objects such a run leaves, the complement of OBJECT_TAKEN, as ranges of the index (project_id, status,
# updated_at): a probe per range goes straight to the objects left, where NOT (OBJECT_TAKEN) walked every taken one.
OBJECTS_LEFT = (
    "po.status < 'Delisted'",
    "po.status > 'Delisted'",
    "po.status = 'Delisted' AND po.updated_at >= %(cutoff)s",
    """po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                 AND (po.updated_at, po.id) >= (%(kept_from_at)s, %(kept_from_id)s::uuid)""",
)
HELD_BACK_AFTER_TAKEN = "(" + "\n     OR ".join(HELD_BACK_BY.format(left=left) for left in OBJECTS_LEFT) + ")"


SCAN_CHUNK = 500  # rows a candidate scan reads per statement: a few ms


@dataclass(frozen=True)
class Phase:
    """One kind of row the job deletes, in batches. `batch_sql`: a batch, one statement that locks its rows FOR UPDATE
    SKIP LOCKED, deletes them and their overrides, and returns the counts, the session it ran on and its last row's
    key. A batch resumes after the key of the batch before the phase's previous one (`first_key` at first).
    `lock_sql` and `delete_sql` redo a batch refused for a data reason in parts. `scan_sql` (projects, orphans)
    finds the candidates the batches take, in chunks, outside any row-locking transaction."""

    name: str
    lock_sql: str
    delete_sql: str
    batch_sql: str
    deleted_overrides: str  # the PurgeResult field its overrides count into
    deleted_cards: str | None  # the PurgeResult field its cards count into; None: it deletes overrides only
    first_key: tuple  # the key (moment, id) before every row of the phase
    scan_sql: str | None = None


# A phase's statements from two parts: `select_batch`, the SELECT of a batch's rows (id, tableoid, ctid, the `moment`
# of its key), and `delete`, the DELETEs of the rows of the CTE `batch` and their overrides, ending in the CTEs
# `deleted_overrides` and (card phases) `deleted_cards`. A locked row's ctid cannot change while its lock is held.
def phase(name: str, *, select_batch: str, delete: str, moment: str, id_type: str, first_key: tuple,
          deleted_cards: str | None, deleted_overrides: str, scan_sql: str | None = None) -> Phase:
    select_batch, delete = clean(select_batch), clean(delete)
    counts = "(SELECT count(*) FROM deleted_cards)" if deleted_cards else "0"
    return Phase(
        name=name,
        # Ids and row addresses come back as one array text value each, not thousands of values to adapt.
        lock_sql=clean(f"""
            SELECT count(*), array_agg(id)::text, array_agg(tableoid)::text, array_agg(ctid)::text,
                   pg_backend_pid(), current_setting('{SESSION_MARKER}', true)
              FROM (
                {indented(select_batch, 16)}
                   FOR UPDATE SKIP LOCKED
              ) AS batch
        """),
        delete_sql=clean(f"""
            WITH batch AS (
                SELECT unnest(%(tables)s::oid[]) AS tableoid, unnest(%(row_addresses)s::tid[]) AS ctid,
                       unnest(%(ids)s::{id_type}[]) AS id
            ),
            {indented(delete, 12)}
            SELECT {counts}, (SELECT count(*) FROM deleted_overrides)
        """),
        batch_sql=clean(f"""
            WITH batch AS (
                {indented(select_batch, 16)}
                   FOR UPDATE SKIP LOCKED
            ),
            {indented(delete, 12)},
            last AS (
                SELECT {moment}, id FROM batch ORDER BY {moment} DESC, id DESC LIMIT 1
            )
            SELECT (SELECT count(*) FROM batch), {counts}, (SELECT count(*) FROM deleted_overrides),
                   pg_backend_pid(), current_setting('{SESSION_MARKER}', true),
                   (SELECT {moment} FROM last), (SELECT id FROM last)
        """),
        deleted_cards=deleted_cards,
        deleted_overrides=deleted_overrides,
        first_key=first_key,
        scan_sql=scan_sql and clean(scan_sql),
    )


def clean(sql: str) -> str:
    """A statement or a part of one as it is written here, without the Python indentation around it."""
    return textwrap.dedent(sql).strip()


def indented(part: str, column: int) -> str:
    """A part of several lines placed at `column` of a statement written here: its lines after the first follow."""
    return textwrap.indent(part, " " * column).lstrip()


# A refused batch's rows (lock_sql's arrays), one (id, table, row address) a row, for the culprit search to split.
BATCH_ROWS = "SELECT unnest(%(ids)s::text[]), unnest(%(tables)s::oid[])::text, unnest(%(row_addresses)s::tid[])::text"


def locked_by_batch(row: str, table: str, *, column: int) -> str:
    """The rows of catalog.`table` (aliased `row`) that the CTE `batch` locked, by row address, for a WHERE written
    at `column`: the ctids give the TID scan, the pair (tableoid, ctid) is checked only where the table has
    partitions (docs/how-it-works.md, "A partitioned catalog")."""
    return indented(f"""{row}.ctid = ANY(ARRAY(SELECT ctid FROM batch))
  AND (NOT (SELECT relhassubclass FROM pg_class WHERE oid = 'catalog.{table}'::regclass)
       OR ({row}.tableoid, {row}.ctid) IN (SELECT tableoid, ctid FROM batch))""", column)


def after_key(moment: str, id_type: str, *, at: str = "%(after_at)s::timestamptz") -> str:
    """The rows after the key (`at`, after_id) in (moment, id) order: an index condition on (moment, id)."""
    return f"({moment}, id) > ({at}, %(after_id)s::{id_type})"


def overdue_cards(cards: str, *, held_back: bool = False) -> str:
    """The SELECT of a batch of overdue cards, oldest first; with `held_back`, none that the rule holds back."""
    return f"""
        SELECT id, tableoid, ctid, updated_at FROM catalog.{cards} AS card
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
             WHERE {locked_by_batch("card", cards, column=13)}
               AND card.status = 'Delisted' AND card.updated_at < %(cutoff)s{keep}
            RETURNING card.id
        ), deleted_overrides AS (
            DELETE FROM catalog.{overrides}
             WHERE {card_key} = ANY(ARRAY(SELECT id FROM deleted_cards))
            RETURNING 1
        )
    """


def chunk_scan(*, table: str, columns: str, moment: str, within: str, candidates: str) -> str:
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
# A project goes only once no property-object card is left under it: re-checked after its lock, with a fresh
# snapshot (catalog.projects_with_property_objects), since an object upsert holds its project FOR KEY SHARE.
PROJECTS = phase(
    "projects",
    scan_sql=chunk_scan(
        table="project_cards", columns="updated_at, id", moment="updated_at",
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
# Overrides whose card is gone (written outside catalog.operations' protocol), written within orphan_sweep_window:
# scanned in chunks from the window on, each card probed by key, and checked again under the batch's locks.
def orphan_phase(name: str, *, overrides: str, cards: str, card_key: str, deleted_overrides: str) -> Phase:
    card_is_gone = f"NOT EXISTS (SELECT FROM catalog.{cards} AS card WHERE card.id = override.{card_key})"
    return phase(
        name,
        scan_sql=chunk_scan(
            table=overrides, columns=f"id, created_at, {card_key} AS card_id", moment="created_at",
            within=after_key(  # from the window on, not from the oldest override
                "created_at", "bigint", at="greatest(%(after_at)s::timestamptz, now() - %(orphan_sweep_window)s)",
            ),
            candidates=f"""FROM chunk
                      LEFT JOIN LATERAL (SELECT true AS found FROM catalog.{cards} AS card
                                          WHERE card.id = chunk.card_id LIMIT 1) AS card ON true
                     WHERE card.found IS NULL""",
        ),
        select_batch=f"""
            SELECT id, tableoid, ctid, created_at FROM catalog.{overrides} AS override
             WHERE id = ANY(%(only_ids)s::bigint[]) AND {card_is_gone} AND {after_key("created_at", "bigint")}
               AND id::text <> ALL(%(skipped_ids)s::text[])
             ORDER BY created_at, id
             LIMIT %(batch_size)s
        """,
        delete=f"""
            deleted_overrides AS (
                DELETE FROM catalog.{overrides} AS override
                 WHERE {locked_by_batch("override", overrides, column=17)}
                   AND {card_is_gone}
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
# The orphans first: a run stopped by a limit in the card phases has still looked at every orphan in the window.
PHASES = (ORPHAN_OBJECT_OVERRIDES, ORPHAN_BUILDING_OVERRIDES, PROPERTY_OBJECTS, PROJECTS)
CARD_PHASES = (PROPERTY_OBJECTS, PROJECTS)


# The layout a run refuses (docs/how-it-works.md, "A partitioned catalog"): a foreign table among the partitions (or
# inheritance children, at any depth) of a table the job deletes from.
FOREIGN_PARTITION = """
WITH RECURSIVE tree AS (
    SELECT oid AS root, oid AS relid FROM pg_class
     WHERE oid IN ('catalog.property_object_cards'::regclass, 'catalog.project_cards'::regclass,
                   'catalog.property_object_display_overrides'::regclass, 'catalog.building_display_overrides'::regclass)
    UNION ALL
    SELECT tree.root, pg_inherits.inhrelid FROM tree JOIN pg_inherits ON pg_inherits.inhparent = tree.relid
)
SELECT tree.root::regclass::text, tree.relid::regclass::text
  FROM tree JOIN pg_class ON pg_class.oid = tree.relid
 WHERE pg_class.relkind = 'f'
 ORDER BY 1, 2
 LIMIT 1
"""


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
# The overdue projects held back now (HELD_BACK) and once every overdue object is gone (HELD_BACK_AFTER without a
# keyset boundary), for the admin page: one index probe a project, its last object in (status, updated_at) order,
# answers both. It is at or after ('Delisted', cutoff) exactly when one of OBJECTS_LEFT's second and third ranges
# holds an object; the first, a status before 'Delisted' (the CHECK admits none), is one look for all the projects.
HELD_BACK_NOW_AND_AFTER = """
SELECT count(last.status),
       count(*) FILTER (
           WHERE (last.status, last.updated_at) >= ('Delisted', %(cutoff)s)
              OR card.id IN (SELECT project_id FROM catalog.property_object_cards WHERE status < 'Delisted'))
  FROM catalog.project_cards AS card
  LEFT JOIN LATERAL (
      SELECT po.status, po.updated_at FROM catalog.property_object_cards AS po
       WHERE po.project_id = card.id
       ORDER BY po.status DESC, po.updated_at DESC LIMIT 1
  ) AS last ON true
 WHERE card.status = 'Delisted' AND card.updated_at < %(cutoff)s
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

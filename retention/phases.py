"""The four phases of a run, in the order it runs them, each with the statements of its batches
(retention/sql/statements.sql, where each reads whole; why each is shaped so: docs/how-it-works.md, "The batches").
"""

from dataclasses import dataclass

from retention.statements import STATEMENTS

SCAN_CHUNK = 500  # rows a candidate scan reads per statement: a few ms
BEFORE_EVERY_CARD = ("-infinity", "00000000-0000-0000-0000-000000000000")
BEFORE_EVERY_OVERRIDE = ("-infinity", 0)


@dataclass(frozen=True)
class Phase:
    """One kind of row the job deletes, in batches. `batch_sql`: a batch, one statement that locks its rows FOR UPDATE
    SKIP LOCKED, deletes them and their overrides, and returns the counts, the session it ran on and its last row's
    key. A batch resumes after the key of the batch before the phase's previous one (`first_key` at first).
    `lock_sql` locks a batch refused for a data reason again, to redo it in parts. `scan_sql` (projects, orphans)
    finds the candidates the batches take, in chunks, outside any row-locking transaction."""

    name: str
    batch_sql: str
    lock_sql: str
    scan_sql: str | None
    deleted_overrides: str  # the PurgeResult field its overrides count into
    deleted_cards: str | None  # the PurgeResult field its cards count into; None: it deletes overrides only
    first_key: tuple  # the key (moment, id) before every row of the phase


def phase(name: str, **fields) -> Phase:
    """The phase whose statements are named `<name>.batch_sql` and so on; it scans for candidates when the file has
    a `<name>.scan_sql`."""
    statements = {kind: STATEMENTS[f"{name}.{kind}"] for kind in ("batch_sql", "lock_sql")}
    return Phase(name, **statements, scan_sql=STATEMENTS.get(f"{name}.scan_sql"), **fields)


ORPHAN_OBJECT_OVERRIDES = phase(
    "orphan_property_object_overrides", deleted_overrides="deleted_property_object_overrides", deleted_cards=None,
    first_key=BEFORE_EVERY_OVERRIDE,
)
ORPHAN_BUILDING_OVERRIDES = phase(
    "orphan_building_overrides", deleted_overrides="deleted_building_overrides", deleted_cards=None,
    first_key=BEFORE_EVERY_OVERRIDE,
)
PROPERTY_OBJECTS = phase(
    "property_objects", deleted_overrides="deleted_property_object_overrides",
    deleted_cards="deleted_property_object_cards", first_key=BEFORE_EVERY_CARD,
)
PROJECTS = phase(
    "projects", deleted_overrides="deleted_building_overrides", deleted_cards="deleted_project_cards",
    first_key=BEFORE_EVERY_CARD,
)
# The orphans first: a run stopped by a limit in the card phases has still looked at every orphan in the window.
PHASES = (ORPHAN_OBJECT_OVERRIDES, ORPHAN_BUILDING_OVERRIDES, PROPERTY_OBJECTS, PROJECTS)
CARD_PHASES = (PROPERTY_OBJECTS, PROJECTS)

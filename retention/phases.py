"""The four phases of a run, in the order it runs them, each with the statements of its batches
(retention/sql/statements.sql, where each reads whole; why each is shaped so: docs/how-it-works.md, "The batches"),
and the scan that finds the candidates of a phase that has one.
"""

from dataclasses import dataclass, field

from retention.session import JobSession
from retention.spans import traced
from retention.statements import STATEMENTS

SCAN_CHUNK = 500  # rows a candidate scan reads per statement: a few ms
BEFORE_EVERY_CARD = ("-infinity", "00000000-0000-0000-0000-000000000000")
BEFORE_EVERY_OVERRIDE = ("-infinity", 0)
FOREIGN_PARTITION_REFUSED = (
    "{table} has a foreign table among its partitions, {partition}: a batch could not skip a row locked on the remote "
    "server, nor bound its wait there; purge_delisted does not run on this layout"
)


class UnsupportedLayout(Exception):
    """The catalog's tables are laid out in a way the job cannot keep its rules on: it refuses to start."""


@dataclass(frozen=True)
class Phase:
    """One kind of row the job deletes, in batches. `batch_sql`: a batch, one statement that locks its rows FOR UPDATE
    SKIP LOCKED, deletes them and their overrides, and returns the counts, the session it ran on and its last row's
    key. `lock_sql` locks a refused batch again, to redo it in parts. `scan_sql` (projects, orphans) finds the
    candidates the batches take, in chunks, outside any row-locking transaction."""

    name: str
    batch_sql: str
    lock_sql: str
    scan_sql: str | None
    deleted_overrides: str  # the PurgeResult field its overrides count into
    deleted_cards: str | None  # the PurgeResult field its cards count into; None: it deletes overrides only
    first_key: tuple  # the key (moment, id) before every row of the phase


def phase(name: str, **fields) -> Phase:
    """The phase whose statements are named `<name>: batch`, `<name>: lock` and, when it scans for candidates,
    `<name>: scan`."""
    return Phase(name, batch_sql=STATEMENTS[f"{name}: batch"], lock_sql=STATEMENTS[f"{name}: lock"],
                 scan_sql=STATEMENTS.get(f"{name}: scan"), **fields)


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


def refuse_unsupported_layout(session: JobSession) -> None:
    """UnsupportedLayout when a table the job deletes from has a foreign table among its partitions. Any other
    partitioning the job runs on (docs/how-it-works.md, "A partitioned catalog")."""
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["foreign partition"])
        found = cursor.fetchone()
    if found:
        table, partition = found
        raise UnsupportedLayout(FOREIGN_PARTITION_REFUSED.format(table=table, partition=partition))


@dataclass
class CandidateScan:
    """How far a phase's scan for candidates (Phase.scan_sql) has got, and the candidates it found that no batch has
    taken yet."""

    phase: Phase
    after: tuple  # the key of the last row scanned
    exhausted: bool = False
    candidates: list[str] = field(default_factory=list)

    def next_candidates(self, session: JobSession, cutoff) -> list[str]:
        """Up to a batch of candidates, scanning on in chunks (each its own statement, no row locks) until it has a
        batch or has read every row; [] when no candidate is left."""
        batch_size = session.limits.batch_size
        while not self.exhausted and len(self.candidates) < batch_size:
            session.check()
            after_at, after_id = self.after
            with traced("scan_chunk", {"retention.phase": self.phase.name}), session.transaction() as cursor:
                cursor.execute(self.phase.scan_sql, {
                    "after_at": after_at, "after_id": after_id, "chunk": SCAN_CHUNK, "cutoff": cutoff,
                    "orphan_sweep_window": session.limits.orphan_sweep_window,
                })
                scanned, found, *last = cursor.fetchone()
            self.candidates += parse_array(found)
            self.exhausted = scanned < SCAN_CHUNK
            self.after = tuple(last)
        batch, self.candidates = self.candidates[:batch_size], self.candidates[batch_size:]
        return batch


def array_literal(values: list[str]) -> str:
    """A PostgreSQL array literal: one text parameter however many ids."""
    return "{" + ",".join(values) + "}"


def parse_array(literal: str | None) -> list[str]:
    """The elements of an array literal, as array_agg(...)::text gives it: NULL (no row) too is no element."""
    return literal.strip("{}").split(",") if literal not in (None, "{}", "") else []

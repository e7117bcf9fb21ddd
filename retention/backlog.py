"""What is waiting for the retention job: Delisted cards per kind, how many are past the cutoff, the oldest, and the
overdue projects held back by a remaining property-object card. Read-only, index-only passes over the partial
indexes, in chunks in a run; how and why: docs/how-it-works.md, "The backlog counts".
"""

import math
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from retention.session import Session
from retention.statements import STATEMENTS

# A run's count: statements of about COUNT_CHUNK index entries, or HELD_BACK_CHUNK overdue projects probed, each its
# own transaction, so that none lasts long whatever the backlog.
COUNT_CHUNK = 50_000
HELD_BACK_CHUNK = 2_000
KINDS = {"property_object_cards": "property_objects", "project_cards": "projects"}  # table: Backlog field


@dataclass(frozen=True)
class KindBacklog:
    delisted: int
    overdue: int
    oldest_delisted_at: datetime | None
    # Overdue, but kept while a property-object card of theirs remains (projects only; None: not counted).
    held_back: int | None = 0
    # Where the chunks of this count ended (`count_in_chunks`): an end count at the same cutoff chunks at them.
    chunk_ends: tuple[datetime, ...] = field(default=(), compare=False, repr=False)

    @property
    def within_window(self) -> int:
        """Delisted, not yet overdue."""
        return self.delisted - self.overdue

    def days_past_due(self, cutoff: datetime) -> float:
        """How long the oldest overdue card has been past the cutoff, in days; 0 when none is overdue. The oldest
        Delisted card is overdue whenever any is, so no query beyond the backlog's own aggregate."""
        if self.oldest_delisted_at is None or self.oldest_delisted_at >= cutoff:
            return 0.0
        return (cutoff - self.oldest_delisted_at) / timedelta(days=1)


@dataclass(frozen=True)
class Backlog:
    cutoff: datetime
    property_objects: KindBacklog
    projects: KindBacklog

    @property
    def overdue_cards(self) -> int:
        return self.property_objects.overdue + self.projects.overdue

    def by_kind(self) -> dict[str, KindBacklog]:
        return {"property_objects": self.property_objects, "projects": self.projects}

    def nights_needed(self, cards_per_night: int) -> int:
        """Nights of full runs to clear the overdue cards (more, if a night's run reaches its time limit first)."""
        return math.ceil(self.overdue_cards / cards_per_night)


def compute_cutoff(session: Session, retention: timedelta, now: datetime | None = None) -> datetime:
    """`now() - retention` on the database clock (`now` replaces that clock in tests only)."""
    with session.transaction() as cursor:
        cursor.execute(STATEMENTS["cutoff"], {"now": now, "retention": retention})
        return cursor.fetchone()[0]


def measure_backlog(
    session: Session, *, cutoff: datetime, count_held_back: bool = True, within_window_from: Backlog | None = None,
    in_chunks: bool = False,
) -> Backlog:
    """The backlog: one statement per kind and one for the held-back projects, or, `in_chunks` (a run), chunks of
    COUNT_CHUNK entries and HELD_BACK_CHUNK projects. Without `count_held_back`, `projects.held_back` is None.

    `within_window_from` is a count at the same cutoff made earlier (a run's start count, for its end count; the
    admin page's per-day counts): the cards Delisted within the retention window are taken from it, and the overdue
    ones are counted again in chunks that end where its chunks ended (docs/how-it-works.md, "The backlog counts")."""
    if within_window_from is not None and within_window_from.cutoff != cutoff:
        raise ValueError("within_window_from was counted at another cutoff")
    params = {"cutoff": cutoff, "count_within_window": within_window_from is None}
    entry_chunk, project_chunk = (COUNT_CHUNK, HELD_BACK_CHUNK) if in_chunks else (None, None)
    way = "in chunks" if in_chunks else "whole"  # the statements of each way: retention/sql/statements.sql
    kinds = {}
    for cards, kind in KINDS.items():
        start = within_window_from and getattr(within_window_from, kind)
        kinds[cards] = count_in_chunks(
            session, STATEMENTS[f"backlog: {cards}, {way}"], params, entry_chunk,
            until=[end for end in start.chunk_ends if end < cutoff] if start else [],
        )
        if start:
            kinds[cards] = replace(kinds[cards], delisted=kinds[cards].delisted + start.within_window)
    held_back = (
        count_in_chunks(session, STATEMENTS[f"backlog: held back, {way}"], params, project_chunk).overdue
        if count_held_back else None
    )
    return Backlog(
        cutoff=cutoff, property_objects=kinds["property_object_cards"],
        projects=replace(kinds["project_cards"], held_back=held_back),
    )


def count_in_chunks(
    session: Session, statement: str, params: dict, chunk: int | None, until: list[datetime] = (),
) -> KindBacklog:
    """Sum `statement`'s chunks of `chunk` entries (None: one statement without a limit), each its own transaction,
    none past the next of `until`, to the end: its entries, the second count (overdue or held back), the
    earliest moment, where the chunks ended."""
    after, earliest, entries, second, ends = "-infinity", None, 0, 0, []
    bounds = [*until, "infinity"]
    while True:
        with session.transaction() as cursor:
            cursor.execute(statement, {**params, "after": after, "until": bounds[0], "chunk": chunk})
            chunk_entries, chunk_second, first, last = cursor.fetchone()
        earliest = earliest or first
        entries += chunk_entries
        second += chunk_second
        if chunk is not None and chunk_entries >= chunk:
            after = last  # the chunk was full: what is left up to the bound comes next
        elif len(bounds) > 1:
            after = bounds.pop(0)
        else:
            return KindBacklog(entries, second, earliest, chunk_ends=tuple(ends))
        ends.append(after)

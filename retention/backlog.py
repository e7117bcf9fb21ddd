"""What is waiting for the retention job: Delisted cards per kind, how many are past the cutoff, the oldest, and the
overdue projects held back by a remaining property-object card.

Read-only and cheap whatever the table sizes: one statement, aggregates over the partial indexes
`(updated_at, id) WHERE status = 'Delisted'`. A run counts it twice (start and end) and shares each count between
its result, its metrics and the progress bar; the web `/metrics` collector and the admin page use it too.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections

MEASURE_BACKLOG = """
WITH objects AS (
    SELECT count(*) AS delisted, count(*) FILTER (WHERE updated_at < %(cutoff)s) AS overdue,
           min(updated_at) AS oldest_delisted_at
      FROM catalog.property_object_cards WHERE status = 'Delisted'
), projects AS (
    SELECT count(*) AS delisted, count(*) FILTER (WHERE updated_at < %(cutoff)s) AS overdue,
           min(updated_at) AS oldest_delisted_at,
           count(*) FILTER (WHERE updated_at < %(cutoff)s AND EXISTS (
               SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id
           )) AS held_back
      FROM catalog.project_cards AS card WHERE status = 'Delisted'
)
SELECT objects.delisted, objects.overdue, objects.oldest_delisted_at,
       projects.delisted, projects.overdue, projects.oldest_delisted_at, projects.held_back
  FROM objects, projects
"""


@dataclass(frozen=True)
class KindBacklog:
    delisted: int
    overdue: int
    oldest_delisted_at: datetime | None
    held_back: int = 0  # overdue, but kept while a property-object card of theirs remains (projects only)

    def overdue_age(self, cutoff: datetime) -> timedelta:
        """How long the oldest overdue card has been past the cutoff; zero when none is overdue. The oldest
        Delisted card is overdue whenever any is, so no query beyond the backlog's own aggregate."""
        if self.oldest_delisted_at is None or self.oldest_delisted_at >= cutoff:
            return timedelta(0)
        return cutoff - self.oldest_delisted_at


@dataclass(frozen=True)
class Backlog:
    cutoff: datetime
    property_objects: KindBacklog
    projects: KindBacklog

    @property
    def overdue_cards(self) -> int:
        return self.property_objects.overdue + self.projects.overdue


def plain_cursor(using: str) -> Callable[[], AbstractContextManager]:
    return lambda: connections[using].cursor()


def compute_cutoff(
    retention: timedelta, now: datetime | None, using: str = "default",
    transaction: Callable[[], AbstractContextManager] | None = None,
) -> datetime:
    """`now() - retention` on the database clock (`now` replaces that clock in tests only)."""
    with (transaction or plain_cursor(using))() as cursor:
        cursor.execute("SELECT coalesce(%s, now()) - %s", [now, retention])
        return cursor.fetchone()[0]


def measure_backlog(
    *, cutoff: datetime, using: str = "default", transaction: Callable[[], AbstractContextManager] | None = None
) -> Backlog:
    """The backlog in one statement; `transaction` (a run's bounded transaction) runs it under the run's timeouts."""
    with (transaction or plain_cursor(using))() as cursor:
        cursor.execute(MEASURE_BACKLOG, {"cutoff": cutoff})
        objects_delisted, objects_overdue, objects_oldest, *projects = cursor.fetchone()
    return Backlog(
        cutoff=cutoff,
        property_objects=KindBacklog(objects_delisted, objects_overdue, objects_oldest),
        projects=KindBacklog(*projects),
    )

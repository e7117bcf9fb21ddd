"""What is waiting for the retention job: Delisted cards per kind, how many are past the cutoff, the oldest, and the
overdue projects held back by a remaining property-object card.

Read-only and cheap whatever the table sizes: one statement, aggregates over the partial indexes
`(updated_at, id) WHERE status = 'Delisted'`. A run counts it twice (start and end) and shares each count between
its result, its metrics and the progress bar; the web `/metrics` collector and the admin page use it too.

The admin page adds one count of the overdue projects held back by their property objects, and previews the next
run by arithmetic on these counts (preview_run) instead of running the job's dry run on every load.
"""

from collections.abc import Callable
from contextlib import AbstractContextManager
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections
from django.db.models import Count, Exists, OuterRef, Q

from catalog.models import CardStatus, ProjectCard, PropertyObjectCard

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


@dataclass(frozen=True)
class HeldBackProjects:
    """Overdue projects the job may not delete yet, because property-object cards of theirs remain."""

    now: int  # with any property-object card left
    after_overdue_objects: int  # with a card that is not overdue: still held back once phase A has run dry


def count_held_back_projects(*, cutoff: datetime, using: str = "default") -> HeldBackProjects:
    """One aggregate over the overdue projects (the partial index), each probing its objects by project_id."""
    objects_of_project = PropertyObjectCard.objects.filter(project_id=OuterRef("id"))
    not_overdue = ~Q(status=CardStatus.DELISTED, updated_at__lt=cutoff)
    counts = (
        ProjectCard.objects.using(using)
        .filter(status=CardStatus.DELISTED, updated_at__lt=cutoff)
        .aggregate(
            now=Count("id", filter=Exists(objects_of_project)),
            after_overdue_objects=Count("id", filter=Exists(objects_of_project.filter(not_overdue))),
        )
    )
    return HeldBackProjects(**counts)


@dataclass(frozen=True)
class PhasePlan:
    deleted: int
    batches: int
    runs_dry: bool  # a batch comes back short: the phase is done within the run's batches


def plan_phase(cards: int, *, batch_size: int, batches_left: int) -> PhasePlan:
    """A phase of retention.service.run_phases: full batches until one comes back short, each batch checked
    against max_batches before it runs. The short batch may be empty: it then ends the phase uncounted, but only
    if a batch was still allowed."""
    capacity = batch_size * batches_left
    deleted = min(cards, capacity)
    return PhasePlan(deleted=deleted, batches=math.ceil(deleted / batch_size), runs_dry=cards < capacity)


@dataclass(frozen=True)
class RunPreview:
    """What the next run would do at these limits (MaxRunDuration aside), reckoned from the counts.

    projects_held_back is what the run leaves held back: exact when it deletes every overdue property object,
    otherwise an upper bound (the projects whose last overdue objects it reaches are freed)."""

    deleted_property_object_cards: int
    deleted_project_cards: int
    batches_processed: int
    has_more: bool
    projects_held_back: int
    projects_held_back_exact: bool


def preview_run(
    *, backlog: Backlog, held_back: HeldBackProjects, batch_size: int, max_batches: int
) -> RunPreview:
    """The run's loop as arithmetic: phase A takes the overdue property objects; phase B runs only if phase A ran
    dry within max_batches, and by then every overdue project not held back by a card that is not overdue is
    purgeable. has_more, as the run reports it: cards it could delete are left for the next run (the projects
    among them are purgeable once no overdue property object is left)."""
    objects = plan_phase(backlog.property_objects.overdue, batch_size=batch_size, batches_left=max_batches)
    purgeable_projects = backlog.projects.overdue - held_back.after_overdue_objects
    objects_left = backlog.property_objects.overdue - objects.deleted
    if objects.runs_dry:
        projects = plan_phase(purgeable_projects, batch_size=batch_size, batches_left=max_batches - objects.batches)
    else:
        projects = PhasePlan(deleted=0, batches=0, runs_dry=False)
    return RunPreview(
        deleted_property_object_cards=objects.deleted,
        deleted_project_cards=projects.deleted,
        batches_processed=objects.batches + projects.batches,
        has_more=objects_left > 0 or purgeable_projects > projects.deleted,
        projects_held_back=held_back.after_overdue_objects if objects_left == 0 else held_back.now,
        projects_held_back_exact=objects_left == 0,
    )

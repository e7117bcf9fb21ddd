"""What is waiting for the retention job: Delisted cards per kind, how many are past the cutoff, the oldest.

Read-only and cheap whatever the table sizes: one aggregate per kind over the partial index
`(updated_at, id) WHERE status = 'Delisted'`. Shared by the job's metrics, the web `/metrics` collector, the admin
page and the command's progress bar.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections
from django.db.models import Count, Min, Q

from catalog.models import CardStatus, ProjectCard, PropertyObjectCard


@dataclass(frozen=True)
class KindBacklog:
    delisted: int
    overdue: int
    oldest_delisted_at: datetime | None

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


def compute_cutoff(retention: timedelta, now: datetime | None, using: str) -> datetime:
    """`now() - retention` on the database clock (`now` replaces that clock in tests only)."""
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT coalesce(%s, now()) - %s", [now, retention])
        return cursor.fetchone()[0]


def measure_backlog(*, cutoff: datetime, using: str = "default") -> Backlog:
    return Backlog(
        cutoff=cutoff,
        property_objects=measure_kind(PropertyObjectCard, cutoff, using),
        projects=measure_kind(ProjectCard, cutoff, using),
    )


def measure_kind(model, cutoff: datetime, using: str) -> KindBacklog:
    counts = model.objects.using(using).filter(status=CardStatus.DELISTED).aggregate(
        delisted=Count("id"),
        overdue=Count("id", filter=Q(updated_at__lt=cutoff)),
        oldest_delisted_at=Min("updated_at"),
    )
    return KindBacklog(**counts)

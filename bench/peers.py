"""Other shapes of the same purge, as other codebases write it, measured next to the job on the same data.

* `naive_django`: what a Django developer writes first: the batch ids into Python
  (`select_for_update(skip_locked=True).values_list`), then two `filter(x__in=ids).delete()`, one atomic block per
  batch.
* `one_shot`: Django's `clearsessions` shape: one `queryset.delete()` of everything overdue (the overrides, then
  the objects; the overrides, then the projects left without objects), each statement its own transaction.
* `autocommit_loop`: Sentry's `BulkDeleteQuery.execute_postgres` shape: `DELETE ... WHERE id = any(array(SELECT id
  ... LIMIT n))` repeated until nothing is left, with no explicit transaction, children first, table by table, n
  its default chunk of 10,000 (`bench.measure.SENTRY_CHUNK_SIZE`). Values are parameters here; Sentry formats
  them into the SQL text.

Each returns what a purge worker reports: its window, the cards deleted, `batch_seconds`, the length of each
transaction that deleted something, and `longest_transaction`, the longest of all its transactions. Imported by
`bench.workers` once Django is set up.
"""

import time
from datetime import timedelta

import psycopg
from django.db import connection, transaction
from django.db.models import Exists, OuterRef, QuerySet

from catalog.models import (
    BuildingDisplayOverride, CardStatus, ProjectCard, PropertyObjectCard, PropertyObjectDisplayOverride,
)

# (overrides, cards) per phase, property objects first; each statement repeated until it deletes nothing.
AUTOCOMMIT_PHASES = (
    (
        """
        DELETE FROM catalog.property_object_display_overrides WHERE id = any(array(
            SELECT override.id FROM catalog.property_object_display_overrides AS override
              JOIN catalog.property_object_cards AS card ON card.id = override.property_object_id
             WHERE card.status = 'Delisted' AND card.updated_at < %(cutoff)s
             LIMIT %(batch_size)s
        ))
        """,
        """
        DELETE FROM catalog.property_object_cards WHERE id = any(array(
            SELECT id FROM catalog.property_object_cards
             WHERE status = 'Delisted' AND updated_at < %(cutoff)s
             LIMIT %(batch_size)s
        ))
        """,
    ),
    (
        """
        DELETE FROM catalog.building_display_overrides WHERE id = any(array(
            SELECT override.id FROM catalog.building_display_overrides AS override
              JOIN catalog.project_cards AS card ON card.id = override.project_id
             WHERE card.status = 'Delisted' AND card.updated_at < %(cutoff)s
               AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id)
             LIMIT %(batch_size)s
        ))
        """,
        """
        DELETE FROM catalog.project_cards WHERE id = any(array(
            SELECT id FROM catalog.project_cards AS card
             WHERE status = 'Delisted' AND updated_at < %(cutoff)s
               AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id)
             LIMIT %(batch_size)s
        ))
        """,
    ),
)


def orm_phases(cutoff) -> tuple:
    """(overdue cards, card model, override model, the override's card key): property objects, then the projects
    left without any property object."""
    objects = PropertyObjectCard.objects.filter(status=CardStatus.DELISTED, updated_at__lt=cutoff)
    projects = ProjectCard.objects.filter(status=CardStatus.DELISTED, updated_at__lt=cutoff).exclude(
        Exists(PropertyObjectCard.objects.filter(project_id=OuterRef("id")))
    )
    return (
        (objects, PropertyObjectCard, PropertyObjectDisplayOverride, "property_object_id"),
        (projects, ProjectCard, BuildingDisplayOverride, "project_id"),
    )


def database_cutoff(retention: timedelta):
    with connection.cursor() as cursor:
        cursor.execute("SELECT now() - %s", [retention])
        return cursor.fetchone()[0]


def outcome(started: float, deleted_cards: int, batch_seconds: list[float], longest_transaction: float) -> dict:
    return {"started": started, "finished": time.monotonic(), "deleted_cards": deleted_cards,
            "batch_seconds": batch_seconds, "longest_transaction": longest_transaction}


def naive_django(*, retention: timedelta, batch_size: int) -> dict:
    started = time.monotonic()
    batch_seconds, transaction_seconds, deleted_cards = [], [], 0
    for overdue, card_model, override_model, override_key in orm_phases(database_cutoff(retention)):
        deleted = batch_size
        while deleted:
            batch_started = time.monotonic()
            with transaction.atomic():
                ids = list(
                    overdue.order_by("updated_at", "id").select_for_update(skip_locked=True)
                    .values_list("id", flat=True)[:batch_size]
                )
                override_model.objects.filter(**{f"{override_key}__in": ids}).delete()
                deleted, _ = card_model.objects.filter(id__in=ids).delete()
            transaction_seconds.append(time.monotonic() - batch_started)
            if deleted:
                batch_seconds.append(transaction_seconds[-1])
                deleted_cards += deleted
    return outcome(started, deleted_cards, batch_seconds, max(transaction_seconds))


def one_shot(*, retention: timedelta) -> dict:
    started = time.monotonic()
    batch_seconds, deleted_cards = [], 0

    def timed_delete(queryset: QuerySet) -> int:
        statement_started = time.monotonic()
        deleted, _ = queryset.delete()
        batch_seconds.append(time.monotonic() - statement_started)
        return deleted

    for overdue, _, override_model, override_key in orm_phases(database_cutoff(retention)):
        timed_delete(override_model.objects.filter(**{f"{override_key}__in": overdue.values("id")}))
        deleted_cards += timed_delete(overdue)
    return outcome(started, deleted_cards, batch_seconds, max(batch_seconds))


def autocommit_loop(*, database_url: str, retention: timedelta, batch_size: int) -> dict:
    batch_seconds, statement_seconds, deleted_cards = [], [], 0
    with psycopg.connect(database_url, autocommit=True) as autocommit:
        started = time.monotonic()
        cutoff = autocommit.execute("SELECT now() - %s", [retention]).fetchone()[0]

        def repeat(statement: str) -> int:
            total = 0
            while True:
                statement_started = time.monotonic()
                deleted = autocommit.execute(statement, {"cutoff": cutoff, "batch_size": batch_size}).rowcount
                statement_seconds.append(time.monotonic() - statement_started)
                if not deleted:
                    return total
                batch_seconds.append(statement_seconds[-1])
                total += deleted

        for delete_overrides, delete_cards in AUTOCOMMIT_PHASES:
            repeat(delete_overrides)
            deleted_cards += repeat(delete_cards)
        return outcome(started, deleted_cards, batch_seconds, max(statement_seconds))

"""Catalog domain operations: what the source-event consumers do to the cards.

They stand in for the consumers of PropertyObjectUpserted / ProjectUpserted / *Deleted, and are used by the
tests, the demo and the shell. Each runs in its own transaction and locks the rows it changes.

The rule the retention job depends on: once a card is Delisted its row is frozen (INV-7, docs/contract.md) —
nothing here changes a Delisted row except a restore by a source upsert — so `updated_at` of a Delisted card is
the moment it was delisted.
"""

import enum
import json
import uuid
from decimal import Decimal

from django.db import connection, transaction
from psycopg import sql

from catalog.models import CardStatus

UPSERTABLE_STATUSES = (CardStatus.PUBLISHED, CardStatus.HIDDEN)


class UpsertOutcome(enum.StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    RESTORED = "restored"


class ProjectCardNotFound(LookupError):
    """A property object was upserted for a project that has no card (never created, or purged)."""


def check_upsertable(status: str) -> None:
    if status not in UPSERTABLE_STATUSES:
        raise ValueError(f"an upsert sets status Published or Hidden, not {status!r}")


def upsert_outcome(previous_status: str | None) -> UpsertOutcome:
    if previous_status is None:
        return UpsertOutcome.CREATED
    if previous_status == CardStatus.DELISTED:
        return UpsertOutcome.RESTORED
    return UpsertOutcome.UPDATED


def upsert_project(
    *, project_id: uuid.UUID, developer_id: uuid.UUID, title: str, status: str = CardStatus.PUBLISHED
) -> UpsertOutcome:
    """Create, update, or restore (Delisted → `status`) a project card. After a purge it simply creates a fresh
    card with the same id."""
    check_upsertable(status)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT status FROM catalog.project_cards WHERE id = %s FOR UPDATE", [project_id])
        previous = cursor.fetchone()
        cursor.execute(
            """
            INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)
            VALUES (%s, %s, %s, %s, now())
            ON CONFLICT (id) DO UPDATE
               SET developer_id = EXCLUDED.developer_id, title = EXCLUDED.title,
                   status = EXCLUDED.status, updated_at = EXCLUDED.updated_at
            """,
            [project_id, developer_id, title, status],
        )
    return upsert_outcome(previous and previous[0])


def upsert_property_object(
    *,
    object_id: uuid.UUID,
    project_id: uuid.UUID,
    title: str,
    price: Decimal | None = None,
    status: str = CardStatus.PUBLISHED,
) -> UpsertOutcome:
    """Create, update, or restore a property object card.

    The project row is held `FOR KEY SHARE` first: the retention job cannot lock (and so cannot purge) a
    project while one of its objects is being written, and an object is never written under a purged project.
    """
    check_upsertable(status)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM catalog.project_cards WHERE id = %s FOR KEY SHARE", [project_id])
        if cursor.fetchone() is None:
            raise ProjectCardNotFound(f"project card {project_id} does not exist")
        cursor.execute("SELECT status FROM catalog.property_object_cards WHERE id = %s FOR UPDATE", [object_id])
        previous = cursor.fetchone()
        cursor.execute(
            """
            INSERT INTO catalog.property_object_cards (id, project_id, title, status, price, updated_at)
            VALUES (%s, %s, %s, %s, %s, now())
            ON CONFLICT (id) DO UPDATE
               SET project_id = EXCLUDED.project_id, title = EXCLUDED.title, status = EXCLUDED.status,
                   price = EXCLUDED.price, updated_at = EXCLUDED.updated_at
            """,
            [object_id, project_id, title, status, price],
        )
    return upsert_outcome(previous and previous[0])


def delist_property_object(*, object_id: uuid.UUID) -> bool:
    """PropertyObjectDeleted: the card goes Delisted and freezes (INV-7, docs/contract.md). Returns False when
    there was nothing to delist (unknown id, or already Delisted — its clock must not be reset)."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE catalog.property_object_cards SET status = 'Delisted', updated_at = now()
             WHERE id = %s AND status <> 'Delisted'
            """,
            [object_id],
        )
        return cursor.rowcount == 1


def delist_project(*, project_id: uuid.UUID) -> int | None:
    """ProjectDeleted with the INV-5 cascade (docs/contract.md): the project and all its not-yet-Delisted
    property objects become Delisted with one `updated_at` (the transaction's `now()`). Objects already Delisted
    keep their own, earlier moment. Returns how many objects the cascade delisted, or None when the project was
    unknown or already Delisted."""
    with transaction.atomic(), connection.cursor() as cursor:
        # Project row first, then its objects: the same lock order as an object upsert, so no deadlock.
        cursor.execute(
            """
            UPDATE catalog.project_cards SET status = 'Delisted', updated_at = now()
             WHERE id = %s AND status <> 'Delisted'
            """,
            [project_id],
        )
        if cursor.rowcount == 0:
            return None
        cursor.execute(
            """
            UPDATE catalog.property_object_cards SET status = 'Delisted', updated_at = now()
             WHERE project_id = %s AND status <> 'Delisted'
            """,
            [project_id],
        )
        return cursor.rowcount


class CardNotFound(LookupError):
    """A display override was written for a card that does not exist (never created, or purged)."""


def add_property_object_override(*, object_id: uuid.UUID, field: str, value) -> int:
    """The writers' protocol for display overrides: hold the card `FOR KEY SHARE` while writing, and refuse a gone
    card. The retention job locks a card `FOR UPDATE` before deleting it with its overrides, so an override is
    either written before (and deleted with the card) or refused after; never left behind as an orphan."""
    return add_override(
        card_table="property_object_cards", card_id=object_id, override_table="property_object_display_overrides",
        key="property_object_id", field=field, value=value,
    )


def add_building_override(*, project_id: uuid.UUID, field: str, value, building_code: str = "") -> int:
    """The same protocol for a project's building overrides."""
    return add_override(
        card_table="project_cards", card_id=project_id, override_table="building_display_overrides",
        key="project_id", field=field, value=value, building_code=building_code,
    )


def add_override(*, card_table, card_id, override_table, key, field, value, building_code=None) -> int:
    columns = {key: card_id, "field": field, "value": json.dumps(value)}
    if building_code is not None:
        columns["building_code"] = building_code
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            sql.SQL("SELECT 1 FROM {} WHERE id = %s FOR KEY SHARE").format(sql.Identifier("catalog", card_table)),
            [card_id],
        )
        if cursor.fetchone() is None:
            raise CardNotFound(f"card {card_id} does not exist")
        cursor.execute(
            sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING id").format(
                sql.Identifier("catalog", override_table),
                sql.SQL(", ").join(map(sql.Identifier, columns)),
                sql.SQL(", ").join(sql.Placeholder() * len(columns)),
            ),
            list(columns.values()),
        )
        return cursor.fetchone()[0]

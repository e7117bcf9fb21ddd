"""The `catalog` schema: read-replica cards of the source system, their display overrides, ranking rules.

The tables are owned by this SQL, not by Django's autodetector (the models are `managed = False`).
`project_id` of a property object is a logical reference with no foreign key (INV-2, docs/contract.md): the
source decides what exists, and the retention job keeps the order "property objects before their project" itself.
The partial indexes on `(updated_at, id) WHERE status = 'Delisted'` make a retention batch cost O(batch),
not O(table); `id` breaks ties so "oldest first" is one deterministic order (a project's cascade gives all
its objects the same `updated_at`).
"""

from django.db import migrations

FORWARD = """
CREATE SCHEMA IF NOT EXISTS catalog;

CREATE TABLE catalog.project_cards (
    id           uuid PRIMARY KEY,
    developer_id uuid NOT NULL,
    title        text NOT NULL,
    status       text NOT NULL CHECK (status IN ('Published', 'Hidden', 'Delisted')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL
);

CREATE TABLE catalog.property_object_cards (
    id         uuid PRIMARY KEY,
    project_id uuid NOT NULL,
    title      text NOT NULL,
    status     text NOT NULL CHECK (status IN ('Published', 'Hidden', 'Delisted')),
    price      numeric NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL
);

CREATE TABLE catalog.property_object_display_overrides (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    property_object_id uuid NOT NULL,
    field              text NOT NULL,
    value              jsonb NULL,
    is_deleted         boolean NOT NULL DEFAULT false,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE catalog.building_display_overrides (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    project_id    uuid NOT NULL,
    building_code text NOT NULL DEFAULT '',
    field         text NOT NULL,
    value         jsonb NULL,
    is_deleted    boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE catalog.ranking_rules (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    developer_id uuid NOT NULL,
    project_id   uuid NULL,
    weight       integer NOT NULL DEFAULT 0,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX project_cards_delisted_updated_at_idx
    ON catalog.project_cards (updated_at, id) WHERE status = 'Delisted';
CREATE INDEX property_object_cards_delisted_updated_at_idx
    ON catalog.property_object_cards (updated_at, id) WHERE status = 'Delisted';
CREATE INDEX property_object_cards_project_id_idx
    ON catalog.property_object_cards (project_id);
CREATE INDEX property_object_display_overrides_property_object_id_idx
    ON catalog.property_object_display_overrides (property_object_id);
CREATE INDEX building_display_overrides_project_id_idx
    ON catalog.building_display_overrides (project_id);
"""

REVERSE = """
DROP TABLE catalog.ranking_rules;
DROP TABLE catalog.building_display_overrides;
DROP TABLE catalog.property_object_display_overrides;
DROP TABLE catalog.property_object_cards;
DROP TABLE catalog.project_cards;
DROP SCHEMA catalog;
"""


class Migration(migrations.Migration):
    initial = True
    dependencies = []
    operations = [migrations.RunSQL(sql=FORWARD, reverse_sql=REVERSE)]

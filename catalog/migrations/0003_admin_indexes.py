"""Indexes that keep the admin fast at millions of cards (catalog/admin/).

* A card list sorts by `updated_at DESC, id DESC` (the admin's `ordering`; `id` breaks ties, so deep pages are one
  deterministic order), optionally filtered by status: `(updated_at, id)` serves the plain list and
  `(status, updated_at, id)` the status filter, both read backwards. A page's ids come from the index alone (an
  index-only scan), so `OFFSET` skips index entries, not table rows.
* The Delisted retention page counts the overdue projects still held back once every overdue property object is
  gone: those with a property object that is not overdue. `(project_id, status, updated_at)` answers that from the
  index; it replaces `(project_id)`, which it serves as well (the job's "no property object left" check, the
  admin's search by project id).

Built CONCURRENTLY, so that the source's upserts are not blocked while a large table is indexed: that cannot run in
a transaction, hence `atomic = False` and one statement per index. A build that fails leaves an INVALID index
behind; drop it (`DROP INDEX CONCURRENTLY catalog.<name>`) and migrate again.
"""

from django.db import migrations

FORWARD = [
    "CREATE INDEX CONCURRENTLY project_cards_updated_at_idx ON catalog.project_cards (updated_at, id)",
    "CREATE INDEX CONCURRENTLY project_cards_status_updated_at_idx ON catalog.project_cards (status, updated_at, id)",
    "CREATE INDEX CONCURRENTLY property_object_cards_updated_at_idx ON catalog.property_object_cards (updated_at, id)",
    "CREATE INDEX CONCURRENTLY property_object_cards_status_updated_at_idx"
    " ON catalog.property_object_cards (status, updated_at, id)",
    "CREATE INDEX CONCURRENTLY property_object_cards_project_id_status_idx"
    " ON catalog.property_object_cards (project_id, status, updated_at)",
    "DROP INDEX CONCURRENTLY catalog.property_object_cards_project_id_idx",
]

REVERSE = [
    "CREATE INDEX CONCURRENTLY property_object_cards_project_id_idx ON catalog.property_object_cards (project_id)",
    "DROP INDEX CONCURRENTLY catalog.property_object_cards_project_id_status_idx",
    "DROP INDEX CONCURRENTLY catalog.property_object_cards_status_updated_at_idx",
    "DROP INDEX CONCURRENTLY catalog.property_object_cards_updated_at_idx",
    "DROP INDEX CONCURRENTLY catalog.project_cards_status_updated_at_idx",
    "DROP INDEX CONCURRENTLY catalog.project_cards_updated_at_idx",
]


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("catalog", "0002_model_state")]
    operations = [migrations.RunSQL(sql=FORWARD, reverse_sql=REVERSE)]

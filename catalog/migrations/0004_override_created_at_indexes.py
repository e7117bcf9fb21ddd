"""Indexes that let the retention job's orphan-override sweep read only the overrides written recently
(`created_at >= now() - DELISTED_RETENTION_ORPHAN_SWEEP_DAYS`, in `(created_at, id)` order) instead of checking
every override against the card tables (retention/service.py, ORPHAN_OBJECT_OVERRIDES / ORPHAN_BUILDING_OVERRIDES).

Built CONCURRENTLY, like 0003, so that writers are not blocked while a large table is indexed: hence `atomic = False`
and one statement per index. A build that fails leaves an INVALID index behind; drop it
(`DROP INDEX CONCURRENTLY catalog.<name>`) and migrate again.
"""

from django.db import migrations

FORWARD = [
    "CREATE INDEX CONCURRENTLY property_object_display_overrides_created_at_idx"
    " ON catalog.property_object_display_overrides (created_at, id)",
    "CREATE INDEX CONCURRENTLY building_display_overrides_created_at_idx"
    " ON catalog.building_display_overrides (created_at, id)",
]

REVERSE = [
    "DROP INDEX CONCURRENTLY catalog.building_display_overrides_created_at_idx",
    "DROP INDEX CONCURRENTLY catalog.property_object_display_overrides_created_at_idx",
]


class Migration(migrations.Migration):
    atomic = False
    dependencies = [("catalog", "0003_admin_indexes")]
    operations = [migrations.RunSQL(sql=FORWARD, reverse_sql=REVERSE)]

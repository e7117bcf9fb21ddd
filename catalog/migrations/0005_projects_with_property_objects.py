"""`catalog.projects_with_property_objects(ids)`: which of these projects still have a property-object card, as of
the moment it is called.

The retention job deletes a batch of projects in one statement, and one statement reads the catalog as of its
start. An object written under a project and committed between that start and the moment the statement locks the
project would be invisible to the statement's own re-check: its project would be deleted and the object left
dangling. A VOLATILE function takes a fresh snapshot for each query it runs (PostgreSQL's "Function Volatility
Categories"), so the job calls this once per batch, after every project of the batch is locked, and keeps the
projects it names. A VOLATILE SQL function that reads a table is never inlined into its caller.
"""

from django.db import migrations

FORWARD = """
CREATE FUNCTION catalog.projects_with_property_objects(project_ids uuid[]) RETURNS uuid[]
LANGUAGE sql VOLATILE STRICT AS $$
    SELECT coalesce(array_agg(DISTINCT project_id), '{}') FROM catalog.property_object_cards
     WHERE project_id = ANY(project_ids)
$$
"""

REVERSE = "DROP FUNCTION catalog.projects_with_property_objects(uuid[])"


class Migration(migrations.Migration):
    dependencies = [("catalog", "0004_override_created_at_indexes")]
    operations = [migrations.RunSQL(sql=FORWARD, reverse_sql=REVERSE)]

"""The projects phase deletes a batch in one statement, and one statement reads the catalog as of its start. Its
re-check that no property-object card is left under a locked project goes through
catalog.projects_with_property_objects, a VOLATILE function, which reads as of its own call: it sees an object
committed after the calling statement began. Shown on the real server with a statement that waits before it calls,
while another connection commits an object, next to the same read done in the statement itself."""

import threading
import time

import psycopg
import pytest
from django.db import connection

from tests.factories import ProjectCardFactory, PropertyObjectCardFactory
from tests.support import database_url_of_tests

pytestmark = pytest.mark.django_db(transaction=True)

# The wait comes first (FROM), the reads after it, per row of `waited`.
READ_AFTER_A_WAIT = """
SELECT catalog.projects_with_property_objects(ARRAY[%(project)s]::uuid[]),
       (SELECT coalesce(array_agg(DISTINCT project_id), '{}') FROM catalog.property_object_cards
         WHERE project_id = %(project)s)
  FROM (SELECT pg_sleep(1.0)) AS waited
"""


def test_the_re_check_sees_an_object_committed_after_the_statement_began():
    project = ProjectCardFactory()

    def write_object_meanwhile():
        time.sleep(0.3)
        with psycopg.connect(database_url_of_tests()) as writer:
            writer.execute(
                "INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)"
                " VALUES (gen_random_uuid(), %s, 'flat', 'Published', now())", [project.id],
            )

    writer = threading.Thread(target=write_object_meanwhile)
    writer.start()
    with connection.cursor() as cursor:
        cursor.execute(READ_AFTER_A_WAIT, {"project": project.id})
        by_the_function, by_the_statement = cursor.fetchone()
    writer.join()

    assert by_the_function == [project.id]
    assert by_the_statement == []  # the statement's own snapshot predates the object


def test_it_names_only_the_projects_that_have_an_object():
    with_object, without = ProjectCardFactory(), ProjectCardFactory()
    PropertyObjectCardFactory(project_id=with_object.id)

    with connection.cursor() as cursor:
        cursor.execute("SELECT catalog.projects_with_property_objects(%s::uuid[])", [[with_object.id, without.id]])
        assert cursor.fetchone()[0] == [with_object.id]

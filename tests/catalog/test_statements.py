"""catalog/sql/statements.sql holds the statements the Delisted retention page sends beside the job's, and the page
reads them from there (catalog.statements): no statement in it is dead."""

import pytest
from django.db import connection
from django.urls import reverse

from catalog.statements import STATEMENTS

pytestmark = pytest.mark.django_db


def test_every_statement_in_the_file_is_one_the_page_sends(staff_client):
    sent = []

    def record(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        response = staff_client.get(reverse("admin:catalog_delistedretention_changelist"))

    assert response.status_code == 200
    assert {name for name, sql in STATEMENTS.items() if sql not in sent} == set()

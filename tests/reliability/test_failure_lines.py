"""What an operator reads after a failure: one line for an unreachable database or a missing schema, and logs in
which every line is at most 8 KiB and, with LOG_FORMAT=json, JSON — a 2,000-card batch's ids included."""

import json
import socket
import time

import psycopg
import pytest
from django.db import connection

from config.logging import MAX_LINE_BYTES
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory
from tests.reliability.support import run_purge
from tests.support import database_url_of_tests, deletes_refused, free_loopback_port

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


# The run, and --last-run, which counts the backlog on the same database.
RUN_OR_LAST_RUN = pytest.mark.parametrize("options", [(), ("--last-run",)], ids=["run", "last-run"])


@RUN_OR_LAST_RUN
def test_an_unreachable_database_is_one_line_and_exit_1(options):
    job = run_purge(*options, DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_loopback_port()}/catalog")

    assert job.returncode == 1
    [line] = job.stderr.strip().splitlines()
    assert "purge_delisted: error: database 'default' is unreachable" in line


def test_a_server_that_accepts_and_never_answers_is_one_line_within_the_connect_timeout():
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nothing ever answers
        started = time.monotonic()
        # The URL's own connect timeout: the settings' default (10 s, tests/retention/test_session_bounds.py) is the
        # same bound, longer.
        job = run_purge(DATABASE_URL=f"postgres://postgres@127.0.0.1:{silent.getsockname()[1]}/catalog"
                                     "?connect_timeout=2")
        took = time.monotonic() - started

    assert job.returncode == 1
    [line] = job.stderr.strip().splitlines()
    assert "purge_delisted: error: database 'default' is unreachable" in line and "timeout" in line
    assert 2 <= took < 2 + 5, took  # not the minutes of the operating system's TCP timeout


@RUN_OR_LAST_RUN
def test_a_database_without_the_catalog_schema_is_one_line_saying_run_migrate(options):
    name = f"{connection.settings_dict['NAME']}_empty"
    server = database_url_of_tests().rsplit("/", 1)[0]  # the test database's server, a Unix socket's too
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            job = run_purge(*options, DATABASE_URL=f"{server}/{name}")
        finally:
            admin.execute(f'DROP DATABASE "{name}"')

    assert job.returncode == 1
    [line] = job.stderr.strip().splitlines()
    assert "the catalog schema is missing" in line and "manage.py migrate" in line


def test_a_failed_batch_of_2000_logs_json_lines_of_at_most_8_kib_with_its_ids_as_arrays():
    project = ProjectCardFactory()
    PropertyObjectCardFactory.create_batch(2000, long_delisted=True, project_id=project.id)

    with deletes_refused(sqlstate="53100"):
        job = run_purge("--batch-size", "2000", LOG_FORMAT="json")

    assert job.returncode == 1
    lines = job.stderr.strip().splitlines()
    records = [json.loads(line) for line in lines]  # every stderr line is JSON, the final error included
    assert max(len(line.encode()) for line in lines) <= MAX_LINE_BYTES
    ids = [card_id for record in records if record["message"] == "batch ids" for card_id in record["batch_ids"]]
    assert len(ids) == len(set(ids)) == 2000
    assert records[-1]["message"].startswith("purge_delisted: error: ")
    assert all(record["time"].endswith("+00:00") for record in records)


def test_a_bad_option_is_reported_before_the_database_is_tried():
    job = run_purge("--batch-size", "0", DATABASE_URL=f"postgres://postgres@127.0.0.1:{free_loopback_port()}/catalog")

    assert job.returncode == 2
    [line] = job.stderr.strip().splitlines()
    assert "--batch-size / DELISTED_RETENTION_BATCH_SIZE" in line

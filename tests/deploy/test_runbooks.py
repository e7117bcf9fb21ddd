"""The runbooks' SQL runs as written: the stuck-lock query finds the job lock's holder, the diagnostics are valid."""

import re

import pytest
from django.db import connection

from tests.support import PROJECT_ROOT, job_lock_held_elsewhere

RUNBOOKS = PROJECT_ROOT / "docs" / "runbooks"

pytestmark = pytest.mark.django_db


def sql_blocks(runbook: str) -> list[str]:
    return re.findall(r"```sql\n(.*?)```", (RUNBOOKS / runbook).read_text(), flags=re.DOTALL)


def test_the_stuck_lock_query_finds_the_session_holding_the_job_lock():
    find_holder = sql_blocks("stuck-lock.md")[0]
    with job_lock_held_elsewhere() as holder:

        with connection.cursor() as cursor:
            cursor.execute(find_holder)
            pids = [row[0] for row in cursor.fetchall()]

        # Only this database's holder: other databases of the cluster (other test runs) may hold the same key.
        assert pids == [holder.info.backend_pid]


def test_the_stuck_lock_query_finds_nobody_when_the_lock_is_free():
    with connection.cursor() as cursor:
        cursor.execute(sql_blocks("stuck-lock.md")[0])

        assert cursor.fetchall() == []


RUNBOOKS_WITH_SQL = sorted(path.name for path in RUNBOOKS.glob("*.md") if sql_blocks(path.name))


def test_every_runbook_but_the_index_has_sql_to_run():
    assert set(RUNBOOKS_WITH_SQL) == {path.name for path in RUNBOOKS.glob("*.md")} - {"README.md"}


@pytest.mark.parametrize("runbook", RUNBOOKS_WITH_SQL)
def test_the_read_only_sql_of_each_runbook_runs(runbook):
    read_only = [
        block for block in sql_blocks(runbook)
        if block.lstrip().startswith(("SELECT", "EXPLAIN")) and "…" not in block and "pg_terminate_backend" not in block
    ]

    assert read_only, f"{runbook}: no read-only SQL block to run"
    with connection.cursor() as cursor:
        for block in read_only:
            cursor.execute(block)

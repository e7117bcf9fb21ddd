"""The job behind a real PgBouncer (tests/servers.py), in every pool mode: refused in one line naming the cause and
the remedy (a direct DELISTED_RETENTION_DATABASE_URL), nothing deleted, no lock left behind."""

import json
import subprocess

import pytest

from catalog.models import PropertyObjectCard
from retention.locks import POOLED
from tests.factories import PropertyObjectCardFactory
from tests.reliability.support import WAIT_SECONDS, job_environment, job_lock_holders, one_error_line
from tests.support import PROJECT_ROOT, manage_command

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def purge_through(url: str, *options: str, **environment: str) -> subprocess.Popen:
    return subprocess.Popen(
        manage_command("purge_delisted", "--json", *options), cwd=PROJECT_ROOT,
        env=job_environment(DATABASE_URL=url, **environment), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


@pytest.mark.parametrize("pool_mode", ["session", "transaction", "statement"])
def test_through_any_pool_the_job_refuses_deletes_nothing_and_leaves_no_lock(pgbouncer, pool_mode):
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    job = purge_through(pgbouncer(pool_mode))
    stdout, stderr = job.communicate(timeout=WAIT_SECONDS)

    assert job.returncode == 1, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert one_error_line(stderr) == POOLED.format(alias="default")
    result = json.loads(stdout)  # --json answers on every exit: one object that says the run failed and why
    assert (result["outcome"], result["error"]) == ("failed", POOLED.format(alias="default"))
    assert PropertyObjectCard.objects.count() == 3
    assert job_lock_holders() == []

"""The job's database connection is lost mid-run (pg_terminate_backend): the run fails with exit 1 and an error
log naming the run and the failed batch, earlier batches stay committed, and the next run completes. The run opens
no other connection (the job connects through a proxy that counts them), so the failed batch's ids (which only the
lost session had) are not read again."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from retention.locks import LOCK_GONE
from retention.management.commands.purge_delisted import ERROR_PREFIX
from tests.factories import PropertyObjectCardFactory, PropertyObjectDisplayOverrideFactory
from tests.reliability.support import (
    HELD_TITLE,
    WAIT_SECONDS,
    CatalogState,
    held_batch,
    job_lock_holders,
    query,
    run_purge,
    start_purge,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_terminated_backend_fails_the_run_keeps_earlier_batches_and_logs_the_failed_batch(freezing_proxy):
    # Oldest first with two cards per batch: batch 0 takes cards 0-1, batch 1 (held) takes cards 2-3.
    long_ago = timezone.now() - timedelta(days=60)
    cards = [
        PropertyObjectCardFactory(
            long_delisted=True, updated_at=long_ago + timedelta(minutes=age),
            title=HELD_TITLE if age == 2 else f"flat {age}",
        )
        for age in range(6)
    ]
    for card in cards:
        PropertyObjectDisplayOverrideFactory(property_object_id=card.id)
    before = CatalogState.read()

    with held_batch() as fault:
        job = start_purge("--batch-size", "2", DATABASE_URL=freezing_proxy.url())
        backend = fault.wait_until_held(job)
        query("SELECT pg_terminate_backend(%s)", [backend])
        _, stderr = job.communicate(timeout=WAIT_SECONDS)

    assert job.returncode == 1, stderr
    assert freezing_proxy.clients == 1  # none after the loss, not even Django's own to turn autocommit back on
    run_id = re.search(r"purge started run_id=(\S+)", stderr).group(1)
    failed = re.search(r"batch failed run_id=(\S+) phase=property_objects batch_index=1 .*sqlstate=57P01", stderr)
    assert failed, stderr
    assert failed.group(1) == run_id
    assert "batch ids" not in stderr
    # The lock died with the session; releasing it must not open a new session that claims otherwise.
    assert LOCK_GONE in stderr
    assert f"{ERROR_PREFIX}the run lost its database connection" in stderr.strip().splitlines()[-1], stderr
    assert "was not held" not in stderr
    assert job_lock_holders() == []

    after = CatalogState.read()
    after.assert_whole_batches_since(before)
    assert after.property_objects == {card.id for card in cards[2:]}

    next_run = run_purge("--batch-size", "2")
    assert next_run.returncode == 0, next_run.stderr
    assert CatalogState.read().property_objects == frozenset()

"""Every batch runs under lock_timeout and statement_timeout (DELISTED_RETENTION_LOCK_TIMEOUT_MS,
DELISTED_RETENTION_STATEMENT_TIMEOUT_MS): a batch that cannot get a lock, or whose statement hangs, gives up, rolls
back whole and fails the run (exit 1) instead of holding its row locks.

Nothing here measures time. The competing lock is held until the job has exited, so a job without the timeouts
would wait for it forever and the test would fail at its subprocess bound."""

import pytest
from django.db import transaction

from tests.factories import (
    BuildingDisplayOverrideFactory,
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.reliability.support import (
    HELD_TITLE,
    CatalogState,
    execute,
    held_batch,
    run_purge,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def overdue_project_with_objects() -> None:
    project = ProjectCardFactory(long_delisted=True)
    BuildingDisplayOverrideFactory.create_batch(2, project_id=project.id)
    for title in ("flat 1", HELD_TITLE):
        card = PropertyObjectCardFactory(long_delisted=True, project_id=project.id, title=title)
        PropertyObjectDisplayOverrideFactory.create_batch(2, property_object_id=card.id)


# Each competing lock, and the line that names the statement giving up: a table lock on the overrides stops the
# orphan scan, which reads them before any batch; a row lock stops the batch that would delete that override.
COMPETING_LOCKS = {
    "access exclusive on the object overrides": (
        "LOCK TABLE catalog.property_object_display_overrides IN ACCESS EXCLUSIVE MODE", "purge_delisted: error:"
    ),
    "access exclusive on the building overrides": (
        "LOCK TABLE catalog.building_display_overrides IN ACCESS EXCLUSIVE MODE", "purge_delisted: error:"
    ),
    "an admin's row lock on one override": (
        "SELECT 1 FROM catalog.property_object_display_overrides ORDER BY id LIMIT 1 FOR UPDATE",
        "batch failed run_id=",
    ),
}


@pytest.mark.parametrize("competing_lock, failure_line", COMPETING_LOCKS.values(), ids=COMPETING_LOCKS.keys())
def test_a_statement_blocked_by_another_transaction_gives_up_at_lock_timeout_and_rolls_back(
    competing_lock, failure_line
):
    overdue_project_with_objects()
    before = CatalogState.read()

    with transaction.atomic():
        execute(competing_lock)
        job = run_purge("--batch-size", "10", DELISTED_RETENTION_LOCK_TIMEOUT_MS="200")

    assert job.returncode == 1, job.stderr
    assert "canceling statement due to lock timeout" in job.stderr
    assert failure_line in job.stderr
    CatalogState.read().assert_whole_batches_since(before)
    assert run_purge("--batch-size", "10").returncode == 0
    assert CatalogState.read().projects == frozenset()


def test_a_batch_whose_statement_hangs_gives_up_at_statement_timeout_and_rolls_back():
    overdue_project_with_objects()
    before = CatalogState.read()

    with held_batch():  # its gate stays shut while the job runs
        job = run_purge("--batch-size", "10", DELISTED_RETENTION_STATEMENT_TIMEOUT_MS="300")

    assert job.returncode == 1, job.stderr
    assert "canceling statement due to statement timeout" in job.stderr
    assert CatalogState.read() == before

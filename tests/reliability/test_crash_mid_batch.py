"""The job process is killed with SIGKILL while a batch is in flight: nothing of the batch survives, the advisory
lock goes with the database session, and the next run completes."""

import signal

import pytest

from catalog.models import PropertyObjectCard
from tests.factories import (
    ProjectCardFactory,
    PropertyObjectCardFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.reliability.support import (
    HELD_TITLE,
    WAIT_SECONDS,
    CatalogState,
    held_batch,
    job_backend_pids,
    job_lock_holders,
    run_purge,
    start_purge,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def overdue_objects_with_overrides(count: int, *, held_position: int) -> list[PropertyObjectCard]:
    project = ProjectCardFactory()
    objects = [
        PropertyObjectCardFactory(
            long_delisted=True, project_id=project.id,
            title=HELD_TITLE if position == held_position else f"flat {position}",
        )
        for position in range(count)
    ]
    for card in objects:
        PropertyObjectDisplayOverrideFactory.create_batch(2, property_object_id=card.id)
    return objects


def test_sigkill_during_a_batch_rolls_the_whole_batch_back_and_the_lock_dies_with_the_session():
    overdue_objects_with_overrides(4, held_position=3)
    before = CatalogState.read()

    with held_batch() as fault:
        job = start_purge("--batch-size", "10")
        backend = fault.wait_until_held(job)
        assert job_lock_holders() == [backend]

        job.send_signal(signal.SIGKILL)
        job.communicate(timeout=WAIT_SECONDS)
        assert job.returncode == -signal.SIGKILL
        # The process is gone but its session is not: the lock lives exactly as long as the session.
        assert job_lock_holders() == [backend]

        # Let the orphaned statement finish: it cannot reach its client, so the backend exits without a commit.
        fault.open_gate()
        wait_for(lambda: not job_backend_pids(), what="the killed job's backend to exit")

        assert CatalogState.read() == before
        assert job_lock_holders() == []

        next_run = run_purge("--batch-size", "10")

    assert next_run.returncode == 0, next_run.stderr
    after = CatalogState.read()
    assert after.property_objects == frozenset()
    assert after.property_object_overrides == frozenset()
    assert after.projects == before.projects

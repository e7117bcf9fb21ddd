"""No orphan override outlives the sweep: every run that gets to run sweeps the orphans before the cards, so a run
stopped on its limits in the card phases has already looked at every orphan within its window."""

import uuid
from datetime import datetime, timedelta, timezone

import pytest

from catalog.models import BuildingDisplayOverride, PropertyObjectDisplayOverride
from tests.factories import (
    BuildingDisplayOverrideFactory, PropertyObjectCardFactory, PropertyObjectDisplayOverrideFactory,
)
from tests.support import purge

pytestmark = pytest.mark.django_db

SWEEP_WINDOW = timedelta(days=7)


def written_ago(override, age: timedelta) -> None:
    # A queryset update: past the models' auto_now.
    type(override).objects.filter(id=override.id).update(created_at=datetime.now(timezone.utc) - age)


def test_an_orphan_seen_by_a_run_stopped_at_max_batches_is_swept_before_it_leaves_the_window():
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)
    orphans = [PropertyObjectDisplayOverrideFactory(property_object_id=uuid.uuid4()),
               BuildingDisplayOverrideFactory(project_id=uuid.uuid4())]
    for orphan in orphans:
        written_ago(orphan, timedelta(days=6))

    stopped = purge(batch_size=1, max_batches=2, orphan_sweep_window=SWEEP_WINDOW)
    for orphan in orphans:  # the night after the next: past the window
        written_ago(orphan, timedelta(days=8))
    completed = purge(orphan_sweep_window=SWEEP_WINDOW)

    assert stopped.has_more is True and completed.has_more is False
    assert not PropertyObjectDisplayOverride.objects.filter(id=orphans[0].id).exists()
    assert not BuildingDisplayOverride.objects.filter(id=orphans[1].id).exists()

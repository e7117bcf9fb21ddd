"""SIGTERM at the worst moment: just after the run checked for a stop and before its batch registered the
statement to cancel. Real database."""

import pytest

from catalog.models import PropertyObjectCard
from retention.service import StopRequest
from tests.factories import PropertyObjectCardFactory
from tests.support import purge

pytestmark = pytest.mark.django_db(transaction=True)


class StopAfterTheFirstCheck(StopRequest):
    """A SIGTERM that arrives right after the run's check before batch 1 (the first time the flag is read)."""

    def __init__(self):
        super().__init__()
        self.checks = 0

    @property
    def requested(self) -> bool:
        self.checks += 1
        if self.checks == 1:
            self.request()
            return False
        return super().requested


def test_a_stop_between_the_check_and_the_batch_deletes_nothing():
    PropertyObjectCardFactory.create_batch(3, long_delisted=True)

    result = purge(stop=StopAfterTheFirstCheck(), batch_size=2)

    assert (result.stop_reason, result.batches_processed, result.deleted_property_object_cards) == ("stopped", 0, 0)
    assert PropertyObjectCard.objects.count() == 3
    assert result.has_more is True  # the end count still ran: no cancel was left over for it

import pytest

from tests.reliability.support import empty_catalog


@pytest.fixture
def committed_catalog(transactional_db):
    """For tests whose job runs in another process, which sees only committed rows. Django's flush between
    transactional tests leaves the unmanaged catalog tables alone, so empty them on both sides of the test."""
    empty_catalog()
    yield
    empty_catalog()

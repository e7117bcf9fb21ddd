"""A transient error (serialization failure 40001, deadlock 40P01) runs the same batch again, at most five attempts
with a short backoff, before it fails the run: the failed attempt rolled back whole, so the new one deletes nothing
twice. A stop that comes during the backoff ends the run stopped. The case met on a partitioned catalog, a row moved
to another partition: tests/retention/test_partitioned_catalog.py."""

import logging

import pytest
from django.db import connection

from catalog.models import CardStatus, PropertyObjectCard, PropertyObjectDisplayOverride
from retention.batches import BATCH_ATTEMPTS
from retention.results import Outcome, StopReason
from retention.session import StopRequest
from tests.factories import ProjectCardFactory, PropertyObjectCardFactory, PropertyObjectDisplayOverrideFactory
from tests.support import deletes_refused, first_delete_fails, purge

pytestmark = pytest.mark.django_db(transaction=True)  # each attempt is a real transaction that rolls back

RETRIED = "batch retried after a transient error"


@pytest.fixture
def overdue_cards():
    project = ProjectCardFactory()
    cards = PropertyObjectCardFactory.create_batch(5, long_delisted=True, project_id=project.id)
    for card in cards:
        PropertyObjectDisplayOverrideFactory(property_object_id=card.id)
    return cards


def records(caplog, message: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == message]


@pytest.mark.parametrize("sqlstate", ["40001", "40P01"])
def test_a_transient_error_on_the_first_attempt_is_retried_and_the_batch_deletes_each_card_once(
    overdue_cards, caplog, sqlstate
):
    caplog.set_level(logging.DEBUG, logger="retention.service")

    with first_delete_fails(sqlstate):
        result = purge(batch_size=10)

    assert (result.outcome, result.batches_processed, result.batch_retries, result.deleted_property_object_cards) == (
        Outcome.COMPLETED, 1, 1, 5,
    )
    assert result.deleted_property_object_overrides == 5
    assert not PropertyObjectCard.objects.exists() and not PropertyObjectDisplayOverride.objects.exists()
    [retried] = records(caplog, RETRIED)
    assert (retried.phase, retried.batch_index, retried.attempt, retried.sqlstate) == (
        "property_objects", 0, 1, sqlstate,
    )
    [done] = records(caplog, "batch done")
    assert (done.retries, done.deleted_cards) == (1, 5)


def test_a_transient_error_that_persists_fails_the_run_after_three_attempts_deleting_nothing(overdue_cards, caplog):
    with deletes_refused(sqlstate="40001"):
        result = purge(batch_size=10)

    assert (result.stop_reason, result.batches_processed, result.deleted_property_object_cards) == (
        StopReason.FAILED, 0, 0,
    )
    assert result.batch_retries == BATCH_ATTEMPTS - 1
    assert "deletes refused by the test" in result.error
    assert [record.attempt for record in records(caplog, RETRIED)] == list(range(1, BATCH_ATTEMPTS))
    [failed] = records(caplog, "batch failed")
    assert failed.sqlstate == "40001"
    assert PropertyObjectCard.objects.count() == PropertyObjectDisplayOverride.objects.count() == 5


class StopOnRetry(logging.Handler):
    """Requests the run's stop when it logs its first retry: the stop comes during the backoff."""

    def __init__(self, stop: StopRequest):
        super().__init__()
        self.stop = stop

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage() == RETRIED:
            self.stop.request()


def test_a_stop_during_the_backoff_ends_the_run_stopped_without_another_attempt(overdue_cards, caplog):
    stop = StopRequest()
    handler = StopOnRetry(stop)
    logging.getLogger("retention.service").addHandler(handler)
    try:
        with deletes_refused(sqlstate="40001"):
            result = purge(batch_size=10, stop=stop)
    finally:
        logging.getLogger("retention.service").removeHandler(handler)

    assert (result.stop_reason, result.outcome, result.deleted_property_object_cards) == (
        StopReason.STOPPED, Outcome.STOPPED, 0,
    )
    assert len(records(caplog, RETRIED)) == 1 and not records(caplog, "batch failed")
    assert PropertyObjectCard.objects.filter(status=CardStatus.DELISTED).count() == 5


# A culprit refused for a data reason, and the first other card deleted after that refusal a serialization failure:
# it comes while the culprits are isolated. Sequences count, as their nextval survives a rollback.
CULPRIT_THEN_ONE_TRANSIENT_ERROR = """
    CREATE SEQUENCE public.culprit_seen;
    CREATE SEQUENCE public.transient_raised;
    CREATE FUNCTION public.refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.id = %(culprit)s THEN
            PERFORM nextval('public.culprit_seen');
            RAISE EXCEPTION 'culprit of the test %%', OLD.id USING ERRCODE = 'P0001';
        END IF;
        IF (SELECT is_called FROM public.culprit_seen) AND nextval('public.transient_raised') = 1 THEN
            RAISE EXCEPTION 'transient error of the test' USING ERRCODE = '40001';
        END IF;
        RETURN OLD;
    END $$;
    CREATE TRIGGER refuse_delete BEFORE DELETE ON catalog.property_object_cards
        FOR EACH ROW EXECUTE FUNCTION public.refuse_delete();
"""


def test_a_transient_error_while_culprits_are_isolated_runs_the_batch_again_and_it_deletes_the_rest(overdue_cards):
    culprit = overdue_cards[2]
    with connection.cursor() as cursor:
        cursor.execute(CULPRIT_THEN_ONE_TRANSIENT_ERROR, {"culprit": str(culprit.id)})
    try:
        result = purge(batch_size=10)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER refuse_delete ON catalog.property_object_cards;"
                           " DROP FUNCTION public.refuse_delete();"
                           " DROP SEQUENCE public.culprit_seen; DROP SEQUENCE public.transient_raised")

    assert [found.card_id for found in result.culprits] == [str(culprit.id)]
    assert (result.batch_retries, result.deleted_property_object_cards, result.deleted_property_object_overrides) == (
        1, 4, 4,
    )
    assert list(PropertyObjectCard.objects.values_list("id", flat=True)) == [culprit.id]

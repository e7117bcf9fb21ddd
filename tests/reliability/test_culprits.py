"""Culprits (cards a trigger refuses to delete) at the production limits: isolating them costs statements, not
transactions, so a run goes past last night's culprits and deletes what lies behind them; one culprit costs a few
statements, and a refusal of everything is recognised in a few too and stops the run as one line; the output names at
most CULPRITS_LISTED of them."""

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection

from retention.results import CULPRITS_LISTED, Run, StopReason
from tests.support import database_url_of_tests, deletes_refused, purge, run_manage

POISON = "OLD.title = 'poison'"
# A trigger's message of about 4 KB, as a chatty constraint or audit trigger raises (165 KB of stdout before
# culprit errors were cut).
LONG_REFUSAL = "card is still referenced by the billing ledger: " + "invoice 2024-000123 line 7, " * 145
# One that JSON makes longest: every character escaped (a quote, a backslash, a tab, a control, non-ASCII).
ESCAPED_REFUSAL = "«ссылка» \"\\\t\x01 " * 300


def overdue_objects(count: int, *, poison_every: int | None = None, poison_first: int = 0) -> None:
    """`count` overdue property objects, oldest first by n; poison: every `poison_every`-th, or the `poison_first`
    oldest."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)"
            " SELECT gen_random_uuid(), gen_random_uuid(),"
            "        CASE WHEN n <= %(first)s OR n %% %(every)s = 0 THEN 'poison' ELSE 'flat' END,"
            "        'Delisted', now() - interval '60 days' + n * interval '1 second'"
            "   FROM generate_series(1, %(count)s) AS n",
            {"count": count, "first": poison_first, "every": poison_every or count + 1},
        )


def remaining() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM catalog.property_object_cards")
        return cursor.fetchone()[0]


@contextmanager
def delete_statements_counted() -> Iterator[list[int]]:
    """The DELETE statements run on the property-object cards in the block, committed or not (a sequence's nextval
    survives a rollback), as the list's one element once the block ends."""
    with connection.cursor() as cursor:
        cursor.execute("""
            CREATE SEQUENCE public.card_deletes;
            CREATE FUNCTION public.count_delete() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM nextval('public.card_deletes'); RETURN NULL; END $$;
            CREATE TRIGGER count_delete BEFORE DELETE ON catalog.property_object_cards
                FOR EACH STATEMENT EXECUTE FUNCTION public.count_delete();
        """)
    counted = []
    try:
        yield counted
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.card_deletes")
            counted.append(cursor.fetchone()[0])
            cursor.execute("DROP TRIGGER count_delete ON catalog.property_object_cards;"
                           " DROP FUNCTION public.count_delete(); DROP SEQUENCE public.card_deletes")


def job_transactions(run) -> tuple[object, int]:
    """What `run()` returns and how many transactions the database counted meanwhile (the job runs as a process,
    whose statistics are flushed when its session ends). The database counts autovacuum's too, and the cards
    inserted and deleted here invite it: it is kept off their table while the job is counted."""
    with psycopg.connect(database_url_of_tests(), autocommit=True) as observer:
        def transactions() -> int:
            observer.execute("SELECT pg_stat_clear_snapshot()")
            return observer.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()[0]
        observer.execute("ALTER TABLE catalog.property_object_cards SET (autovacuum_enabled = false)")
        try:
            before = transactions()
            outcome = run()
            return outcome, transactions() - before
        finally:
            observer.execute("ALTER TABLE catalog.property_object_cards RESET (autovacuum_enabled)")


@pytest.mark.django_db(transaction=True)
def test_fifty_scattered_culprits_among_twenty_thousand_clear_in_one_run_at_the_defaults():
    overdue_objects(20_000, poison_every=400)

    with deletes_refused(when=POISON):
        result = purge()

    assert remaining() == 50
    assert result.deleted_property_object_cards == 19_950 and result.has_more is False
    assert result.culprit_count == 50 and len(result.culprits) == CULPRITS_LISTED
    assert len({c.card_id for c in result.culprits}) == CULPRITS_LISTED  # each once


@pytest.mark.django_db(transaction=True)
def test_the_cards_behind_a_wall_of_two_thousand_culprits_are_deleted_in_the_same_run():
    overdue_objects(4_000, poison_first=2_000)

    with deletes_refused(when=POISON):
        result = purge()

    assert result.deleted_property_object_cards == 2_000 and remaining() == 2_000
    assert result.culprit_count == 2_000 and result.stop_reason == StopReason.COMPLETED
    assert result.batches_processed == 2  # the wall, redone in one transaction, and the batch behind it


@pytest.mark.django_db(transaction=True)
def test_max_batches_one_on_a_batch_of_two_thousand_culprits_is_one_batch_of_two_transactions():
    overdue_objects(2_010, poison_first=2_000)  # and cards after them, which go through

    with deletes_refused(when=POISON):
        completed, transactions = job_transactions(lambda: run_manage("purge_delisted", "--json", "--max-batches", "1"))

    result = json.loads(completed.stdout)
    assert completed.returncode == 1 and result["batches_processed"] == 1 and result["culprit_count"] == 2_000
    # the lock, the counts at start and end (a chunk of each), the orphan scans, the failed batch and its
    # isolation: about 20, not 4,000; the database counts autovacuum's too, which a fresh test database invites
    assert transactions < 100, transactions


@pytest.mark.django_db(transaction=True)
def test_a_trigger_refusing_every_delete_ends_the_run_within_a_hundred_statements_and_five_seconds_as_one_line():
    overdue_objects(10_000, poison_first=10_000)

    with deletes_refused(), delete_statements_counted() as deletes:
        started = time.monotonic()
        completed = run_manage("purge_delisted", "--json")
        took = time.monotonic() - started

    result = json.loads(completed.stdout)
    assert completed.returncode == 1 and result["outcome"] == "failed" and remaining() == 10_000
    assert "parts of a refused batch were all refused, and so were the cards after it" in result["error"]
    assert "deletes refused by the test" in result["error"]
    assert deletes[0] <= 100 and took < 5, (deletes, took)
    assert len(completed.stdout) < 8_000
    assert len(completed.stderr.splitlines()) < 100


@pytest.mark.django_db(transaction=True)
def test_one_culprit_among_two_thousand_is_found_within_twenty_six_delete_statements():
    overdue_objects(2_000, poison_every=1_337)

    with deletes_refused(when=POISON), delete_statements_counted() as deletes:
        result = purge()

    assert result.culprit_count == 1 and result.deleted_property_object_cards == 1_999 and remaining() == 1
    assert deletes[0] <= 26, deletes


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("cards", "poison_every", "options", "refusal"), [
    (1_000, 20, (), LONG_REFUSAL),  # 50 scattered culprits, 20 of them listed
    (1_000, 1, ("--batch-size", "50"), LONG_REFUSAL),  # every delete refused: a systemic stop, naming the message
    (1_000, 20, (), ESCAPED_REFUSAL),
], ids=["fifty culprits", "every card refused", "escapes in every character"])
def test_culprits_with_long_error_messages_keep_the_json_result_under_16_kib(cards, poison_every, options, refusal):
    overdue_objects(cards, poison_every=poison_every)

    with deletes_refused(when=POISON, error=refusal):
        completed = run_manage("purge_delisted", "--json", *options)

    result = json.loads(completed.stdout)
    assert completed.returncode == 1 and result["outcome"] == "failed"
    assert len(result["culprits"]) == min(result["culprit_count"], CULPRITS_LISTED) > 0
    # Shortened like a log line: the head of the message stays, which says what refused the card.
    assert all(culprit["error"].startswith(refusal[:60]) for culprit in result["culprits"])
    size = len(completed.stdout.encode())
    assert size < 16 * 1024, f"the --json result is {size} bytes"


@pytest.mark.django_db(transaction=True)
def test_an_internal_error_xx000_ends_the_run_instead_of_making_a_culprit():
    overdue_objects(40, poison_every=10)

    with deletes_refused(when=POISON, error="cache lookup failed", sqlstate="XX000"):
        result = purge(batch_size=16)

    assert result.stop_reason == StopReason.FAILED and result.culprit_count == 0
    assert "cache lookup failed" in result.error and remaining() == 40


def test_a_systemic_refusal_is_the_run_s_error_even_before_any_culprit_is_singled_out():
    """At the largest batch (10,000 cards, 14 halvings deep) the search singles out a culprit before its 32nd part;
    a deeper one would end the run on the systemic rule first, and its error must still say why."""
    run = Run(uuid.uuid4(), systemic_failure="the first 32 parts of a refused batch were all refused; run stopped")

    result = run.result(StopReason.FAILED)

    assert (result.outcome, result.culprit_count, result.error) == ("failed", 0, run.systemic_failure)

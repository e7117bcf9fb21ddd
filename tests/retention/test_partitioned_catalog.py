"""The job on a partitioned catalog: each test re-creates a catalog table as a partitioned one in the test database
(the same columns, constraints and indexes as the migrations made, the primary key widened by the partition key as
PostgreSQL requires) and puts the original back after. A row address (ctid) is unique within one partition only, so
a batch names its rows by (tableoid, ctid): a batch deletes only the rows it locked, at most batch_size of them.
What the job assumes of the schema: docs/how-it-works.md, "A partitioned catalog"."""

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection

from retention.results import Outcome, StopReason
from retention.phases import FOREIGN_PARTITION_REFUSED
from tests.support import Progress, database_url_of_tests, deletes_refused, held_in_another_transaction, purge

pytestmark = pytest.mark.django_db(transaction=True)  # the partitioned table and the job's transactions are real

SAVED = "catalog_unpartitioned"  # the schema the original table waits in
HASH_BY_4 = [f"FOR VALUES WITH (MODULUS 4, REMAINDER {remainder})" for remainder in range(4)]


@contextmanager
def partitioned(table: str, *, by: str, bounds: list[str], primary_key: str | None) -> Iterator[None]:
    """catalog.`table` re-created PARTITION BY `by`, one partition per bound, for the block (without a primary key
    when `primary_key` is None)."""
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE SCHEMA {SAVED}; ALTER TABLE catalog.{table} SET SCHEMA {SAVED}")
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_get_indexdef(indexrelid) FROM pg_index"
                " WHERE indrelid = %s::regclass AND NOT indisprimary", [f"{SAVED}.{table}"],
            )
            indexes = [definition.replace(f" ON {SAVED}.", " ON catalog.") for (definition,) in cursor.fetchall()]
            cursor.execute(
                f"CREATE TABLE catalog.{table} (LIKE {SAVED}.{table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
                f" INCLUDING IDENTITY{f', PRIMARY KEY ({primary_key})' if primary_key else ''}) PARTITION BY {by}"
            )
            for number, bound in enumerate(bounds):
                cursor.execute(f"CREATE TABLE catalog.{table}_{number} PARTITION OF catalog.{table} {bound}")
            for definition in indexes:
                cursor.execute(definition)
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS catalog.{table}; ALTER TABLE {SAVED}.{table} SET SCHEMA catalog;"
                           f" DROP SCHEMA {SAVED}")


def execute(statement: str, params: dict | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return cursor.fetchall() if cursor.description else []


def published_project() -> str:
    return execute(
        "INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)"
        " VALUES (gen_random_uuid(), gen_random_uuid(), 'home', 'Published', now()) RETURNING id::text"
    )[0][0]


def overdue_property_objects(count: int, *, project_id: str, poison_every: int = 0) -> list[str]:
    """`count` overdue property objects under `project_id`, one second apart, each with one override; their ids
    oldest first. With `poison_every`, every poison_every-th is titled 'poison'."""
    rows = execute(
        """
        INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)
        SELECT gen_random_uuid(), %(project_id)s,
               CASE WHEN %(poison_every)s > 0 AND n %% %(poison_every)s = 0 THEN 'poison' ELSE 'flat' END,
               'Delisted', now() - interval '60 days' + n * interval '1 second'
          FROM generate_series(1, %(count)s) AS n
        RETURNING id::text, updated_at
        """,
        {"count": count, "project_id": project_id, "poison_every": poison_every},
    )
    execute("INSERT INTO catalog.property_object_display_overrides (property_object_id, field, value)"
            " SELECT id, 'title', '\"x\"' FROM catalog.property_object_cards")
    return [card_id for card_id, _ in sorted(rows, key=lambda row: row[1])]


def overdue_projects(count: int) -> list[str]:
    """`count` overdue projects with no property object, one second apart, each with one building override."""
    rows = execute(
        """
        INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)
        SELECT gen_random_uuid(), gen_random_uuid(), 'gone', 'Delisted',
               now() - interval '60 days' + n * interval '1 second'
          FROM generate_series(1, %(count)s) AS n
        RETURNING id::text, updated_at
        """,
        {"count": count},
    )
    execute("INSERT INTO catalog.building_display_overrides (project_id, field, value)"
            " SELECT id, 'title', '\"x\"' FROM catalog.project_cards")
    return [card_id for card_id, _ in sorted(rows, key=lambda row: row[1])]


def ids_of(table: str) -> set[str]:
    return {card_id for (card_id,) in execute(f"SELECT id::text FROM catalog.{table}")}


def orphans_and_dangling() -> tuple[int, int, int]:
    """Overrides whose card is gone (both kinds), and property objects whose project is gone."""
    return execute(
        """
        SELECT (SELECT count(*) FROM catalog.property_object_display_overrides AS o
                 WHERE NOT EXISTS (SELECT FROM catalog.property_object_cards AS c WHERE c.id = o.property_object_id)),
               (SELECT count(*) FROM catalog.building_display_overrides AS o
                 WHERE NOT EXISTS (SELECT FROM catalog.project_cards AS c WHERE c.id = o.project_id)),
               (SELECT count(*) FROM catalog.property_object_cards AS po
                 WHERE NOT EXISTS (SELECT FROM catalog.project_cards AS c WHERE c.id = po.project_id))
        """
    )[0]


def lock_card(table: str, card_id: str):
    return lambda: execute(f"SELECT 1 FROM catalog.{table} WHERE id = %(id)s FOR UPDATE", {"id": card_id})


KINDS = {
    "property_objects": ("property_object_cards", "deleted_property_object_cards", "deleted_property_object_overrides"),
    "projects": ("project_cards", "deleted_project_cards", "deleted_building_overrides"),
}


@pytest.mark.parametrize("kind", KINDS)
def test_four_batches_of_500_on_cards_hash_partitioned_by_id_delete_exactly_the_2000_oldest_they_locked(kind):
    table, deleted_cards, deleted_overrides = KINDS[kind]
    with partitioned(table, by="HASH (id)", bounds=HASH_BY_4, primary_key="id"):
        if kind == "projects":
            oldest_first = overdue_projects(20_000)
        else:
            oldest_first = overdue_property_objects(20_000, project_id=published_project())
        held = oldest_first[10]  # a restore holding one of the oldest: skipped, never waited on
        per_batch = []

        with held_in_another_transaction(lock_card(table, held)):
            result = purge(batch_size=500, max_batches=4, progress=Progress(on_batch=per_batch.append))

        # An objects' batch locks the next overdue card in place of the held one; a projects' batch takes the
        # candidates a scan found, so the one holding the held project is one short.
        taken = set(oldest_first[:2001 if kind == "property_objects" else 2000]) - {held}
        assert (result.outcome, result.batches_processed, sum(per_batch)) == (Outcome.HAS_MORE, 4, len(taken))
        assert max(per_batch) == 500 and len(taken) >= 1999
        assert getattr(result, deleted_cards) == getattr(result, deleted_overrides) == len(taken)
        assert ids_of(table) == set(oldest_first) - taken
        assert orphans_and_dangling() == (0, 0, 0)
        # The 2,000 came from every partition: addresses of one partition met rows of the others.
        assert len(execute(f"SELECT DISTINCT tableoid FROM catalog.{table}")) == 4


def test_a_culprit_search_on_cards_hash_partitioned_by_id_deletes_only_the_refused_batchs_own_cards():
    with partitioned("property_object_cards", by="HASH (id)", bounds=HASH_BY_4, primary_key="id"):
        oldest_first = overdue_property_objects(4000, project_id=published_project(), poison_every=50)
        poison = {card_id for (card_id,) in execute(
            "SELECT id::text FROM catalog.property_object_cards WHERE title = 'poison'")}
        per_batch = []

        with deletes_refused(when="OLD.title = 'poison'"):
            result = purge(batch_size=200, max_batches=2, progress=Progress(on_batch=per_batch.append))

        # Each batch redone in halves, its own statement on half its ids: its 4 culprits left, its 196 others deleted.
        assert result.outcome is Outcome.FAILED and result.culprit_count == 8
        assert per_batch == [196, 196] and result.deleted_property_object_cards == 392
        assert ids_of("property_object_cards") == (set(oldest_first) - set(oldest_first[:400])) | (
            poison & set(oldest_first[:400]))
        assert orphans_and_dangling() == (0, 0, 0)


def test_orphan_overrides_in_a_partitioned_overrides_table_go_at_most_a_batch_at_a_time():
    with partitioned("property_object_display_overrides", by="HASH (id)", bounds=HASH_BY_4,
                     primary_key="id"):
        project = published_project()
        overdue = overdue_property_objects(300, project_id=project)
        live = execute("INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)"
                       " VALUES (gen_random_uuid(), %(project)s, 'live', 'Published', now()) RETURNING id",
                       {"project": project})[0][0]
        execute("INSERT INTO catalog.property_object_display_overrides (property_object_id, field, value)"
                " SELECT %(live)s, 'title', '\"x\"' FROM generate_series(1, 1000)", {"live": live})
        # 3,000 orphans: overrides of cards deleted outside the job, written within the sweep's window.
        execute("INSERT INTO catalog.property_object_display_overrides (property_object_id, field, value)"
                " SELECT gen_random_uuid(), 'title', '\"x\"' FROM generate_series(1, 3000)")
        per_batch = []

        limited = purge(batch_size=200, max_batches=4, progress=Progress(on_batch=per_batch.append))

        assert limited.deleted_property_object_overrides == 800 and limited.deleted_property_object_cards == 0
        assert orphans_and_dangling()[0] == 3000 - 800

        result = purge(batch_size=200)

        assert result.outcome is Outcome.COMPLETED
        assert result.deleted_property_object_cards == len(overdue)
        assert result.deleted_property_object_overrides == 3000 - 800 + len(overdue)
        assert execute("SELECT count(*) FROM catalog.property_object_display_overrides")[0][0] == 1000  # the live
        assert orphans_and_dangling() == (0, 0, 0)


class Restorer:
    """Live restores on real separate connections while the job runs: each flips one of the oldest overdue cards,
    the ones the next batches take, from Delisted to Published, which moves its row to the Published partition.
    `restored`: the ids whose restore committed."""

    def __init__(self, threads: int = 2):
        self.restored: set[str] = set()
        self.conflicts = 0
        self._done = threading.Event()
        self._threads = [threading.Thread(target=self._restore) for _ in range(threads)]

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _restore(self) -> None:
        pick = random.Random()
        with psycopg.connect(database_url_of_tests(), autocommit=True) as source:
            while not self._done.is_set():
                try:
                    restored = source.execute(
                        """
                        UPDATE catalog.property_object_cards SET status = 'Published', updated_at = now()
                         WHERE id = (SELECT id FROM catalog.property_object_cards
                                      WHERE status = 'Delisted' AND updated_at < now() - interval '30 days'
                                      ORDER BY updated_at, id OFFSET %(offset)s LIMIT 1 FOR UPDATE SKIP LOCKED)
                        RETURNING id::text
                        """,
                        {"offset": pick.randrange(500)},
                    ).fetchall()
                except psycopg.errors.SerializationFailure:  # a row it picked moved meanwhile: the job's case too
                    self.conflicts += 1
                    continue
                self.restored.update(card_id for (card_id,) in restored)
                time.sleep(0.01)


def test_cards_list_partitioned_by_status_under_live_restores_the_run_completes_and_deletes_no_restored_card(caplog):
    with partitioned("property_object_cards", by="LIST (status)", primary_key="id, status",
                     bounds=["FOR VALUES IN ('Delisted')", "FOR VALUES IN ('Published')", "FOR VALUES IN ('Hidden')"]):
        oldest_first = set(overdue_property_objects(6000, project_id=published_project()))
        per_batch = []

        with Restorer() as restores:
            result = purge(batch_size=100, progress=Progress(on_batch=per_batch.append))

        retried = "batch retried after a transient error"
        retries = [record for record in caplog.records if record.getMessage() == retried]
        assert result.stop_reason in (StopReason.COMPLETED, StopReason.MAX_BATCHES), result.error
        assert result.outcome is not Outcome.FAILED, result.error
        assert max(per_batch) <= 100 and sum(per_batch) == result.deleted_property_object_cards
        assert restores.restored and restores.restored <= oldest_first
        left = ids_of("property_object_cards")
        assert restores.restored <= left  # no false delete: every restored card is still there
        assert len(oldest_first - left) == result.deleted_property_object_cards
        assert orphans_and_dangling() == (0, 0, 0)
        # Whether a batch met a row in flight this time is the traffic's timing: when one did, it was retried.
        assert all(record.sqlstate == "40001" for record in retries), retries
        assert result.batch_retries == len(retries)


def job_waits_for_a_lock(observer: psycopg.Connection) -> bool:
    observer.execute("SELECT pg_stat_clear_snapshot()")
    return observer.execute(
        "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = current_database()"
        " AND application_name LIKE 'purge_delisted %%' AND wait_event_type = 'Lock'"
    ).fetchone()[0]


def test_an_override_moved_to_another_partition_while_the_batch_waits_for_it_is_deleted_by_the_batchs_retry(caplog):
    with partitioned("property_object_display_overrides", by="LIST (is_deleted)", primary_key="id, is_deleted",
                     bounds=["FOR VALUES IN (false)", "FOR VALUES IN (true)"]):
        cards = overdue_property_objects(50, project_id=published_project())
        url = database_url_of_tests()
        with psycopg.connect(url) as writer, psycopg.connect(url, autocommit=True) as observer:
            # A writer outside catalog.operations' protocol soft-deletes an override of the oldest card without
            # locking the card: the batch locks the card, then waits for the override's row.
            writer.execute("UPDATE catalog.property_object_display_overrides SET is_deleted = true"
                           " WHERE property_object_id = %(card)s", {"card": cards[0]})

            def commit_once_the_job_waits():
                deadline = time.monotonic() + 10
                while not job_waits_for_a_lock(observer) and time.monotonic() < deadline:
                    time.sleep(0.01)
                writer.commit()  # the row moves to the is_deleted partition under the waiting DELETE

            committer = threading.Thread(target=commit_once_the_job_waits)
            committer.start()
            try:
                result = purge(batch_size=100)
            finally:
                committer.join(timeout=30)

        [retried] = [record for record in caplog.records
                     if record.getMessage() == "batch retried after a transient error"]
        assert (retried.sqlstate, retried.attempt) == ("40001", 1)
        assert "moved to another partition" in retried.error
        assert (result.outcome, result.batches_processed) == (Outcome.COMPLETED, 1)
        assert result.deleted_property_object_cards == result.deleted_property_object_overrides == 50
        assert not ids_of("property_object_cards")
        assert orphans_and_dangling() == (0, 0, 0)


@pytest.fixture
def loopback_server():
    """A postgres_fdw server pointing back at the test database, as a DBA moving old cards elsewhere would set up."""
    if not execute("SELECT 1 FROM pg_available_extensions WHERE name = 'postgres_fdw'"):
        pytest.skip("postgres_fdw is not installed on this server (PostgreSQL's contrib)")
    db = connection.settings_dict
    execute("CREATE EXTENSION postgres_fdw")
    execute(f"CREATE SERVER loopback FOREIGN DATA WRAPPER postgres_fdw"
            f" OPTIONS (host '{db['HOST'] or 'localhost'}', port '{db['PORT'] or 5432}', dbname '{db['NAME']}')")
    execute(f"CREATE USER MAPPING FOR CURRENT_USER SERVER loopback OPTIONS (user '{db['USER']}')")
    try:
        yield "loopback"
    finally:
        execute("DROP EXTENSION postgres_fdw CASCADE")  # its server, mapping and foreign tables


@pytest.mark.parametrize("dry_run", [False, True], ids=["run", "dry run"])
def test_cards_with_a_foreign_table_among_their_partitions_are_refused_at_start_in_one_line(loopback_server, dry_run):
    # A unique index cannot span a foreign partition: such a layout has no primary key on the parent.
    with partitioned("property_object_cards", by="LIST (status)", primary_key=None,
                     bounds=["FOR VALUES IN ('Delisted')", "FOR VALUES IN ('Published')"]):
        execute("CREATE TABLE public.hidden_cards (LIKE catalog.property_object_cards)")
        execute("CREATE FOREIGN TABLE catalog.property_object_cards_hidden PARTITION OF catalog.property_object_cards"
                " FOR VALUES IN ('Hidden') SERVER loopback OPTIONS (schema_name 'public', table_name 'hidden_cards')")
        try:
            cards = overdue_property_objects(10, project_id=published_project())

            result = purge(dry_run=dry_run)

            assert result.error == FOREIGN_PARTITION_REFUSED.format(
                table="catalog.property_object_cards", partition="catalog.property_object_cards_hidden")
            assert result.batches_processed == 0 and ids_of("property_object_cards") == set(cards)
        finally:
            execute("DROP TABLE public.hidden_cards")

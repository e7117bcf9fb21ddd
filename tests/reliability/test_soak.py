"""Soak: for a bounded time, worker threads delist, restore and upsert projects and property objects through
catalog.operations while purge runs repeat with small batches and a one-second retention, so cards become overdue
during the soak; and `manage.py purge_delisted` processes repeat too, each sent SIGTERM once it runs (at a random
moment of a run with overdue cards seeded for it, or just after its `purge completed` line): every one must print its
result and exit with its run's status.
Afterwards everything is checked against two records the job knows nothing about:

* soak_record.operations — each worker writes what its operation did in the operation's own transaction: the
  card's new status, and `now()`, which is exactly the updated_at the operation wrote. Each worker owns its own
  projects and their objects, so a card's records are in commit order.
* soak_record.deletions — an AFTER DELETE trigger writes every deleted card row as it was, in the deleting
  transaction, with that transaction's `now()` and whether an object's project still existed.

RELIABILITY_SOAK_SECONDS sets the length (default 12, at most 30)."""

import json
import os
import random
import signal
import subprocess
import threading
import time
import traceback
import uuid
from collections import Counter, defaultdict
from datetime import timedelta

import pytest
from django.db import connection, transaction

from catalog import operations
from catalog.models import CardStatus, DeveloperRankingRule
from tests.factories import (
    BuildingDisplayOverrideFactory,
    DeveloperRankingRuleFactory,
    PropertyObjectDisplayOverrideFactory,
)
from tests.support import purge
from tests.reliability.support import WAIT_SECONDS, CatalogState, execute, query, start_purge

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SOAK_SECONDS = min(30.0, float(os.environ.get("RELIABILITY_SOAK_SECONDS", "12")))
RETENTION = timedelta(seconds=1)
WORKERS = 3
PURGERS = 2
PROJECTS_PER_WORKER = 5
OBJECTS_PER_PROJECT = 3
PROJECT = "project"
PROPERTY_OBJECT = "property_object"
# Cards 60 days overdue for a signalled process, whose retention is whole days (the workers' cards never are it): about
# half a second of batches of 5 and pauses of 10 ms.
SEEDED = 200
RESULT_OUTCOMES = {"completed", "has_more", "stopped", "lock_busy"}  # a signalled run's: never failed, never none

RECORD_SCHEMA = """
CREATE SCHEMA soak_record;
CREATE TABLE soak_record.operations (
    seq     bigserial PRIMARY KEY,
    kind    text NOT NULL,
    card_id uuid NOT NULL,
    outcome text NOT NULL,
    status  text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE soak_record.deletions (
    kind            text NOT NULL,
    card_id         uuid NOT NULL,
    status          text NOT NULL,
    updated_at      timestamptz NOT NULL,
    deleted_at      timestamptz NOT NULL DEFAULT now(),
    project_existed boolean
);
CREATE FUNCTION soak_record.record_deletion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO soak_record.deletions (kind, card_id, status, updated_at, project_existed)
    VALUES (TG_ARGV[0], OLD.id, OLD.status, OLD.updated_at,
            EXISTS (SELECT FROM catalog.project_cards WHERE id = (to_jsonb(OLD) ->> 'project_id')::uuid));
    RETURN NULL;
END $$;
CREATE TRIGGER soak_record_deletion AFTER DELETE ON catalog.project_cards
    FOR EACH ROW EXECUTE FUNCTION soak_record.record_deletion('project');
CREATE TRIGGER soak_record_deletion AFTER DELETE ON catalog.property_object_cards
    FOR EACH ROW EXECUTE FUNCTION soak_record.record_deletion('property_object');
"""


@pytest.fixture
def soak_record():
    execute(RECORD_SCHEMA)
    yield
    execute(
        "DROP TRIGGER soak_record_deletion ON catalog.project_cards; "
        "DROP TRIGGER soak_record_deletion ON catalog.property_object_cards; "
        "DROP SCHEMA soak_record CASCADE"
    )


def record(kind: str, card_id: uuid.UUID, outcome: str, status: str) -> None:
    execute(
        "INSERT INTO soak_record.operations (kind, card_id, outcome, status) VALUES (%s, %s, %s, %s)",
        [kind, card_id, outcome, status],
    )


def seed_overdue_objects(count: int) -> None:
    """`count` property objects Delisted 60 days ago under a Published project of their own, recorded as the workers
    record their operations (the moment recorded is the updated_at written)."""
    execute(
        """
        WITH project AS (
            INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)
            VALUES (gen_random_uuid(), gen_random_uuid(), 'seeded', 'Published', now()) RETURNING id, updated_at
        ), objects AS (
            INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)
            SELECT gen_random_uuid(), project.id, 'seeded', 'Delisted', now() - interval '60 days' - n * interval '1 s'
              FROM project, generate_series(1, %s) AS n
            RETURNING id, updated_at
        )
        INSERT INTO soak_record.operations (kind, card_id, outcome, status, at)
        SELECT 'project', id, 'seeded', 'Published', updated_at FROM project
         UNION ALL
        SELECT 'property_object', id, 'seeded', 'Delisted', updated_at FROM objects
        """,
        [count],
    )


class Worker:
    """Source events for the projects it owns, at random, each recorded in the operation's transaction."""

    def __init__(self, seed: int):
        self.random = random.Random(seed)
        self.projects = {
            uuid.uuid4(): [uuid.uuid4() for _ in range(OBJECTS_PER_PROJECT)] for _ in range(PROJECTS_PER_WORKER)
        }
        self.developer_id = uuid.uuid4()
        self.stats = Counter()

    def create_cards(self) -> None:
        for project_id, object_ids in self.projects.items():
            self.upsert_project(project_id)
            for object_id in object_ids:
                self.upsert_property_object(object_id, project_id)

    def run_until(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            project_id = self.random.choice(list(self.projects))
            object_id = self.random.choice(self.projects[project_id])
            event = self.random.choices(
                ["object upsert", "object delist", "project upsert", "project delist"], weights=[15, 45, 8, 32]
            )[0]
            if event == "object upsert":
                self.upsert_property_object(object_id, project_id)
            elif event == "object delist":
                self.delist_property_object(object_id)
            elif event == "project upsert":
                self.upsert_project(project_id)
            else:
                self.delist_project(project_id)
            time.sleep(self.random.uniform(0, 0.02))

    def upsert_project(self, project_id: uuid.UUID) -> None:
        status = self.random.choice(operations.UPSERTABLE_STATUSES)
        with transaction.atomic():
            outcome = operations.upsert_project(
                project_id=project_id, developer_id=self.developer_id, title="complex", status=status
            )
            record(PROJECT, project_id, outcome, status)
        self.stats[f"project {outcome}"] += 1

    def upsert_property_object(self, object_id: uuid.UUID, project_id: uuid.UUID) -> None:
        status = self.random.choice(operations.UPSERTABLE_STATUSES)
        try:
            with transaction.atomic():
                outcome = operations.upsert_property_object(
                    object_id=object_id, project_id=project_id, title="flat", status=status
                )
                record(PROPERTY_OBJECT, object_id, outcome, status)
        except operations.ProjectCardNotFound:
            self.stats["object upsert rejected: project purged"] += 1
        else:
            self.stats[f"object {outcome}"] += 1

    def delist_property_object(self, object_id: uuid.UUID) -> None:
        with transaction.atomic():
            if operations.delist_property_object(object_id=object_id):
                record(PROPERTY_OBJECT, object_id, "delisted", CardStatus.DELISTED)
                self.stats["object delisted"] += 1

    def delist_project(self, project_id: uuid.UUID) -> None:
        with transaction.atomic():
            if operations.delist_project(project_id=project_id) is None:
                return
            record(PROJECT, project_id, "delisted", CardStatus.DELISTED)
            # The INV-5 cascade gave exactly these objects this transaction's now().
            for (object_id,) in query(
                "SELECT id FROM catalog.property_object_cards"
                " WHERE project_id = %s AND status = 'Delisted' AND updated_at = now()",
                [project_id],
            ):
                record(PROPERTY_OBJECT, object_id, "delisted by its project", CardStatus.DELISTED)
        self.stats["project delisted"] += 1


def in_thread(work, errors: list[str]) -> threading.Thread:
    def run():
        try:
            work()
        except Exception:
            errors.append(traceback.format_exc())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def purge_repeatedly(deadline: float, results: list, hold_off: threading.Event) -> None:
    """Runs in this process, back to back; none begins while `hold_off` is set."""
    while time.monotonic() < deadline:
        if not hold_off.is_set():
            results.append(
                purge(
                    retention=RETENTION, batch_size=3, max_batches=20, max_duration=timedelta(seconds=2)
                )
            )
        time.sleep(0.05)


def signalled_run(number: int, schedule: random.Random, hold_off: threading.Event) -> tuple[str, str | None]:
    """A purge_delisted process sent SIGTERM once it runs: every second one at a random moment after its last line
    (`purge completed`, or `purge skipped` on a busy lock); the others at a random moment of a run that has SEEDED
    overdue cards to delete, which the runs in this process leave to it until it holds the lock. Returns its outcome,
    and what went wrong, if anything."""
    after_the_end = number % 2 == 1
    if not after_the_end:
        hold_off.set()
        seed_overdue_objects(SEEDED)
    job = start_purge("--json", "--batch-size", "5", "--batch-pause-ms", "10")
    began, ended, lines = threading.Event(), threading.Event(), []

    def read_stderr() -> None:
        for line in job.stderr:
            lines.append(line)
            if "purge started" in line or "purge skipped" in line:
                began.set()
            if "purge completed" in line or "purge skipped" in line:
                ended.set()
        began.set()
        ended.set()

    reader = threading.Thread(target=read_stderr)
    reader.start()
    (ended if after_the_end else began).wait(WAIT_SECONDS)
    hold_off.clear()
    # During the run's batches; or from its last line to its exit, about 0.2 s in which it prints its result.
    time.sleep(schedule.uniform(0, 0.3 if not after_the_end else 0.2))
    moment = "after its end" if after_the_end else "during its run"
    if job.poll() is None:
        job.send_signal(signal.SIGTERM)
    else:
        moment = "never: it had exited"
    try:
        job.wait(timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        job.kill()
        job.wait()
    reader.join(timeout=WAIT_SECONDS)
    stdout = job.stdout.read()
    job.stdout.close()
    try:
        outcome = json.loads(stdout)["outcome"]
    except json.JSONDecodeError:
        outcome = None
    if job.returncode == 0 and outcome in RESULT_OUTCOMES:
        return f"{outcome} (signalled {moment})", None
    return "broken", f"run {number}, signalled {moment}: exit {job.returncode}, {stdout!r}, {''.join(lines)[-800:]}"


def purge_signalled_repeatedly(deadline: float, outcomes: Counter, problems: list[str], hold_off) -> None:
    schedule, number = random.Random(0), 0
    while time.monotonic() < deadline:
        outcome, problem = signalled_run(number, schedule, hold_off)
        outcomes[outcome] += 1
        if problem:
            problems.append(problem)
        number += 1


def test_soak_under_concurrent_source_events_deletes_only_overdue_delisted_cards(soak_record):
    workers = [Worker(seed) for seed in range(WORKERS)]
    for worker in workers:
        worker.create_cards()
    for worker in workers:
        for project_id, object_ids in worker.projects.items():
            BuildingDisplayOverrideFactory(project_id=project_id)
            for object_id in object_ids:
                PropertyObjectDisplayOverrideFactory(property_object_id=object_id)
    DeveloperRankingRuleFactory.create_batch(3)
    rules_before = list(DeveloperRankingRule.objects.order_by("id").values())
    overrides_before = CatalogState.read()

    errors, purge_results, signalled, unanswered, hold_off = [], [], Counter(), [], threading.Event()
    deadline = time.monotonic() + SOAK_SECONDS
    threads = [in_thread(lambda worker=worker: worker.run_until(deadline), errors) for worker in workers]
    threads += [in_thread(lambda: purge_repeatedly(deadline, purge_results, hold_off), errors) for _ in range(PURGERS)]
    threads.append(in_thread(lambda: purge_signalled_repeatedly(deadline, signalled, unanswered, hold_off), errors))
    for thread in threads:
        thread.join(timeout=SOAK_SECONDS + WAIT_SECONDS)
    assert not any(thread.is_alive() for thread in threads), "a soak thread did not finish"

    assert errors == []
    assert unanswered == [], "\n".join(unanswered)  # every signalled process printed its result
    deletions = query(
        "SELECT kind, card_id, status, updated_at, deleted_at, project_existed FROM soak_record.deletions"
    )
    assert_every_deleted_card_was_overdue_delisted(deletions)
    assert_final_state_follows_from_the_records(deletions)
    assert_nothing_dangles(overrides_before, deletions)
    assert list(DeveloperRankingRule.objects.order_by("id").values()) == rules_before

    stats = sum((worker.stats for worker in workers), Counter())
    deleted = Counter(kind for kind, *_ in deletions)
    print(f"soak {SOAK_SECONDS}s: {len(purge_results)} purge runs, signalled processes {dict(signalled)}, "
          f"deleted {dict(deleted)}, events {dict(stats)}")
    # The soak proved something only if both phases purged, and purged cards came back from the source.
    assert deleted[PROPERTY_OBJECT] and deleted[PROJECT]
    assert stats["object created"] > WORKERS * PROJECTS_PER_WORKER * OBJECTS_PER_PROJECT
    # And the signals came both during a run, which stopped, and after a run (or a skip) had printed its last line.
    assert signalled["stopped (signalled during its run)"]
    assert sum(count for outcome, count in signalled.items() if outcome.endswith("(signalled after its end)"))


def assert_every_deleted_card_was_overdue_delisted(deletions: list[tuple]) -> None:
    for kind, card_id, status, updated_at, deleted_at, project_existed in deletions:
        assert status == CardStatus.DELISTED, f"{kind} {card_id} was deleted while {status}"
        assert updated_at < deleted_at - RETENTION, f"{kind} {card_id} was deleted while young"
        assert project_existed or kind == PROJECT, f"property object {card_id} was purged under a missing project"


def assert_final_state_follows_from_the_records(deletions: list[tuple]) -> None:
    """Replay each card's recorded states in order: every deletion removed a state that a delist produced, a
    recreation followed a deletion (the job won the row), a restore or update did not (the upsert won), and what
    is left in the catalog is each card's last recorded state unless a deletion took it."""
    deleted_states = {(kind, card_id, updated_at) for kind, card_id, _, updated_at, *_ in deletions}
    states = defaultdict(list)
    for kind, card_id, outcome, status, at in query(
        "SELECT kind, card_id, outcome, status, at FROM soak_record.operations ORDER BY seq"
    ):
        states[kind, card_id].append((outcome, status, at))
    recorded_delists = {
        (kind, card_id, at) for (kind, card_id), history in states.items()
        for _, status, at in history if status == CardStatus.DELISTED
    }
    assert deleted_states <= recorded_delists, "a deleted row was not one a delist wrote"

    current = {
        **{(PROJECT, card_id): (status, updated_at) for card_id, status, updated_at in query(
            "SELECT id, status, updated_at FROM catalog.project_cards")},
        **{(PROPERTY_OBJECT, card_id): (status, updated_at) for card_id, status, updated_at in query(
            "SELECT id, status, updated_at FROM catalog.property_object_cards")},
    }
    assert set(current) <= set(states), "a card exists that no operation wrote"
    for (kind, card_id), history in states.items():
        for (_, _, previous_at), (outcome, _, _) in zip(history, history[1:]):
            previous_deleted = (kind, card_id, previous_at) in deleted_states
            assert previous_deleted == (outcome == operations.UpsertOutcome.CREATED), (kind, card_id, history)
        _, last_status, last_at = history[-1]
        if (kind, card_id, last_at) in deleted_states:
            assert (kind, card_id) not in current
        else:
            assert current.get((kind, card_id)) == (last_status, last_at), (kind, card_id, history)


def assert_nothing_dangles(before: CatalogState, deletions: list[tuple]) -> None:
    after = CatalogState.read()
    ever_deleted = {card_id for _, card_id, *_ in deletions}
    assert query(
        "SELECT id FROM catalog.property_object_cards AS o"
        " WHERE NOT EXISTS (SELECT FROM catalog.project_cards AS p WHERE p.id = o.project_id)"
    ) == []
    assert after.property_object_overrides == {
        (override, owner) for override, owner in before.property_object_overrides if owner not in ever_deleted
    }
    assert after.building_overrides == {
        (override, owner) for override, owner in before.building_overrides if owner not in ever_deleted
    }

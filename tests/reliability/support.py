"""Shared helpers of the reliability tests: the job as a real process, faults injected on the database side, and
snapshots of the catalog to compare before and after.

Everything here talks to the real test database. A job subprocess gets `DATABASE_URL` pointing at it; the job names
its sessions `purge_delisted <run_id>` (application_name), which is how a test finds the job's backend in
`pg_stat_activity` and `pg_locks`, as an operator would.
"""

import json
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

import psycopg
from django.db import connection
from django.utils import timezone

from catalog.models import PropertyObjectCard
from retention.locks import advisory_lock_key
from retention.management.commands.purge_delisted import ERROR_PREFIX
from retention.service import LOCK_NAME
from tests.factories import PropertyObjectCardFactory, PropertyObjectDisplayOverrideFactory
from tests.support import PROJECT_ROOT, advisory_lock_holders, manage_command, manage_env

JOB_APPLICATION_NAME = "purge_delisted %"  # a LIKE pattern
# A bound for anything a test waits for, so that a broken guarantee fails the test instead of hanging it.
WAIT_SECONDS = 30
# The process exits this soon after a SIGTERM with nothing stuck (the batch in flight ends, the run counts what is
# left and prints its result), and after a second SIGTERM or SIGINT whatever it waits on.
EXIT_SECONDS = 1
# Between a first and a second signal: two signals pending at once are one to the process. The first's handler runs
# within milliseconds, psycopg and the run's sleep waking up for it.
SIGNAL_GAP = 0.3
# After a second signal the job's backend sees its client gone within the server's connection check (1 s) and
# exits, its batch rolled back and its lock freed; generous for load.
LOCK_FREED_SECONDS = 5
HELD_TITLE = "hold this batch"

T = TypeVar("T")


def one_error_line(stderr: str) -> str:
    """The message of the run's one error line: after the line's time, level and logger, before the run_id and
    trace_id fields that every line of a run carries (text log format)."""
    [line] = [line for line in stderr.splitlines() if ERROR_PREFIX in line]
    return line.partition(ERROR_PREFIX)[2].partition(" run_id=")[0]


def job_environment(**overrides: str) -> dict[str, str]:
    # The tests read the job's INFO lines (run_id), whatever LOG_LEVEL the caller's environment sets.
    return manage_env(**{"LOG_LEVEL": "INFO", **overrides})


def run_purge(*options: str, **environment: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        manage_command("purge_delisted", *options), cwd=PROJECT_ROOT, env=job_environment(**environment),
        capture_output=True, text=True, timeout=WAIT_SECONDS,
    )


def overdue_cards(count: int, *, held: int | None = None, poison: int | None = None, overrides: int = 1) -> list:
    """Overdue property objects with `overrides` display overrides each, oldest first (two a batch at
    `--batch-size 2`); the one at position `held` held by held_batch(), the one at `poison` titled 'poison'."""
    long_ago = timezone.now() - timedelta(days=60)
    cards = [
        PropertyObjectCardFactory(long_delisted=True, updated_at=long_ago + timedelta(minutes=age),
                                  title={held: HELD_TITLE, poison: "poison"}.get(age, f"flat {age}"))
        for age in range(count)
    ]
    for card in cards:
        PropertyObjectDisplayOverrideFactory.create_batch(overrides, property_object_id=card.id)
    return cards


def assert_the_next_run_completes() -> None:
    """The next run deletes every card left: the run under test left nothing in its way."""
    next_run = run_purge("--json")
    assert next_run.returncode == 0, next_run.stderr
    assert json.loads(next_run.stdout)["outcome"] == "completed"
    assert not PropertyObjectCard.objects.exists()


def start_purge(*options: str, **environment: str) -> subprocess.Popen:
    return subprocess.Popen(
        manage_command("purge_delisted", *options), cwd=PROJECT_ROOT, env=job_environment(**environment),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def wait_for(condition: Callable[[], T], *, what: str, timeout: float = WAIT_SECONDS) -> T:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up after {timeout}s waiting for {what}")
        time.sleep(0.05)
    return value


def insert_overdue_objects(database_url: str, count: int) -> None:
    """`count` property objects Delisted 60 days ago under one Published project, on a throwaway server."""
    with psycopg.connect(database_url, autocommit=True) as server:
        project = uuid.uuid4()
        server.execute(
            "INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)"
            " VALUES (%s, gen_random_uuid(), 'live project', 'Published', now())", [project],
        )
        server.execute(
            "INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)"
            " SELECT gen_random_uuid(), %s, 'flat', 'Delisted', now() - interval '60 days'"
            "   FROM generate_series(1, %s)", [project, count],
        )


def execute(sql: str, params: list | None = None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def query(sql: str, params: list | None = None) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def job_backend_pids() -> list[int]:
    return [
        pid for (pid,) in query(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND application_name LIKE %s",
            [JOB_APPLICATION_NAME],
        )
    ]


def job_lock_holders() -> list[int]:
    return advisory_lock_holders(advisory_lock_key(LOCK_NAME))


class HeldBatch:
    """A trigger that holds the batch deleting a card titled HELD_TITLE inside the database, after its DELETE
    statement has done all its work and before the job can commit: it polls a gate with pg_sleep until the test
    opens it. Install with `held_batch()`."""

    def open_gate(self) -> None:
        execute("UPDATE fault_injection.gate SET open = true")

    def release(self, job: subprocess.Popen) -> dict:
        """Opens the gate; the job's `--json` result once it has exited 0, within EXIT_SECONDS of the gate opening."""
        self.open_gate()
        opened = time.monotonic()
        result, stderr = finished(job)
        took = time.monotonic() - opened
        assert job.returncode == 0, stderr
        assert took <= EXIT_SECONDS, took
        return result

    def wait_until_held(self, job: subprocess.Popen) -> int:
        """The pid of the job's backend once it waits in the trigger; fails at once if the job ended instead."""

        def held_backend() -> int | None:
            if job.poll() is not None:
                raise AssertionError(f"the job ended (exit {job.returncode}) before its batch was held")
            rows = query(
                """
                SELECT pid FROM pg_stat_activity
                 WHERE datname = current_database() AND application_name LIKE %s AND wait_event = 'PgSleep'
                """,
                [JOB_APPLICATION_NAME],
            )
            return rows[0][0] if rows else None

        return wait_for(held_backend, what="the job's batch to be held by the trigger")


@contextmanager
def held_batch() -> Iterator[HeldBatch]:
    execute(
        f"""
        CREATE SCHEMA fault_injection;
        CREATE TABLE fault_injection.gate (open boolean NOT NULL);
        INSERT INTO fault_injection.gate VALUES (false);
        CREATE FUNCTION fault_injection.hold_batch() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            WHILE NOT (SELECT open FROM fault_injection.gate) LOOP
                PERFORM pg_sleep(0.05);
            END LOOP;
            RETURN NULL;
        END $$;
        -- Row-level AFTER triggers fire at the end of the statement: the batch's cards and overrides are
        -- deleted (uncommitted) while the job waits here.
        CREATE TRIGGER hold_batch AFTER DELETE ON catalog.property_object_cards
           FOR EACH ROW WHEN (OLD.title = '{HELD_TITLE}') EXECUTE FUNCTION fault_injection.hold_batch();
        """
    )
    fault = HeldBatch()
    try:
        yield fault
    finally:
        # A batch still held would keep the DROP waiting for its table lock: let it go first.
        fault.open_gate()
        execute(
            "DROP TRIGGER IF EXISTS hold_batch ON catalog.property_object_cards; "
            "DROP SCHEMA IF EXISTS fault_injection CASCADE"
        )


@dataclass(frozen=True)
class CatalogState:
    """Ids of every card and every override (with its owner), to compare a catalog before and after a run."""

    property_objects: frozenset
    projects: frozenset
    property_object_overrides: frozenset
    building_overrides: frozenset

    @classmethod
    def read(cls) -> "CatalogState":
        return cls(
            property_objects=frozenset(row[0] for row in query("SELECT id FROM catalog.property_object_cards")),
            projects=frozenset(row[0] for row in query("SELECT id FROM catalog.project_cards")),
            property_object_overrides=frozenset(
                query("SELECT id, property_object_id FROM catalog.property_object_display_overrides")
            ),
            building_overrides=frozenset(query("SELECT id, project_id FROM catalog.building_display_overrides")),
        )

    def assert_whole_batches_since(self, before: "CatalogState") -> None:
        """Nothing appeared, and every card either kept all its overrides or went together with all of them."""
        assert self.property_objects <= before.property_objects
        assert self.projects <= before.projects
        assert self.property_object_overrides == {
            (override, owner) for override, owner in before.property_object_overrides
            if owner in self.property_objects
        }
        assert self.building_overrides == {
            (override, owner) for override, owner in before.building_overrides if owner in self.projects
        }


def finished(job: subprocess.Popen) -> tuple[dict, str]:
    """The job's `--json` result and its stderr once it exits, within WAIT_SECONDS (killed after)."""
    try:
        stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    return json.loads(stdout), stderr


def signalled(job: subprocess.Popen, *signums: signal.Signals) -> tuple[dict | None, str, float]:
    """Send the job these signals, SIGNAL_GAP apart, and wait for its exit (killed after WAIT_SECONDS, which fails
    the test). Returns its `--json` result (None when it printed none), its stderr, and how long after the last
    signal it exited."""
    for number, signum in enumerate(signums):
        if number:
            time.sleep(SIGNAL_GAP)
        job.send_signal(signum)
    sent = time.monotonic()
    try:
        stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
    except subprocess.TimeoutExpired:
        job.kill()
        _, stderr = job.communicate()
        raise AssertionError(f"still running {WAIT_SECONDS}s after {signums}; stderr: {stderr[-2000:]}") from None
    return (json.loads(stdout) if stdout.strip() else None), stderr, time.monotonic() - sent


def stopped_within_bound(job: subprocess.Popen) -> tuple[dict | None, str]:
    """SIGTERM the job, which waits on nothing stuck, and wait for its exit; fails naming how long it ran on when that
    took over EXIT_SECONDS."""
    result, stderr, took = signalled(job, signal.SIGTERM)
    assert took <= EXIT_SECONDS, f"exited {took:.2f}s after SIGTERM (exit {job.returncode}); stderr: {stderr[-2000:]}"
    return result, stderr


def ended_by_a_second_signal(job: subprocess.Popen, signum: signal.Signals) -> None:
    """A first and a second `signum`: the process exits within EXIT_SECONDS of the second, with status 128 + signum,
    no result, and one error line saying so."""
    result, stderr, took = signalled(job, signum, signum)
    assert took <= EXIT_SECONDS, f"exited {took:.2f}s after the second {signum.name}; stderr: {stderr[-2000:]}"
    assert job.returncode == 128 + signum, stderr
    assert result is None, result
    assert one_error_line(stderr).startswith(f"a second {signum.name} ended the process at once: "), stderr


def seconds_until_the_lock_is_free() -> float:
    """How long until the server has no session of the job and nobody holds its lock; fails after
    LOCK_FREED_SECONDS."""
    started = time.monotonic()
    wait_for(lambda: not job_backend_pids() and not job_lock_holders(), what="the job's session and lock to go",
             timeout=LOCK_FREED_SECONDS)
    return time.monotonic() - started

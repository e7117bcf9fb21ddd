"""SIGTERM while a refused batch is redone in parts (culprit isolation), seen from outside as an operator sees it:
the process, its exit, its `--json` result and the catalog. The isolation runs many short statements in one
transaction, and the run checks for a stop before each part: every trial must end `stopped` within EXIT_SECONDS of
the signal, without going on to the end of the isolation, its transaction rolled back whole, deleting nothing it
should not; with exit 1 (outcome `failed`) when it had found a culprit before the signal.

The trials share one catalog, restored between them: CLEAN overdue cards (the first batch, deleted whole), then a
batch of BATCH_SIZE overdue cards of which every second is refused by a trigger after REFUSAL_SLEEP, so that its
isolation lasts a second or two; and cards that are not overdue. A sequence the trigger advances on each refusal
(sequences ignore rollbacks) tells the test how far an isolation has got: one run to its end counts them, then each
trial signals after a random number of them plus a random fraction of a statement. STOP_ISOLATION_SEED=<seed>
replays a failed schedule."""

import json
import os
import random
import signal
import subprocess
import time
from dataclasses import dataclass

import psycopg
import pytest

from tests.reliability.support import EXIT_SECONDS, WAIT_SECONDS, CatalogState, execute, query, start_purge
from tests.support import database_url_of_tests, deletes_refused

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

TRIALS = 20  # the issue asks for at least 20; each costs a process start (about a second) and part of an isolation
BATCH_SIZE = 200
CLEAN = BATCH_SIZE  # the first batch: overdue cards nobody refuses
NOT_OVERDUE = 20  # of each kind: Delisted within the retention, Published
REFUSAL_SLEEP = 0.002
REFUSALS = "public.stop_isolation_refusals"
# The trigger counts a refusal, then sleeps, then refuses (tests.support.deletes_refused raises).
SLOW_REFUSAL = (
    f"OLD.title = 'poison' AND nextval('{REFUSALS}') > 0 AND EXISTS (SELECT FROM pg_sleep({REFUSAL_SLEEP}))"
)
LIVE_PROJECT = "5e1ec7ed-0000-4000-8000-000000000001"

# Deterministic ids, so that restoring the catalog between trials is an idempotent INSERT.
RESTORE_CATALOG = f"""
INSERT INTO catalog.project_cards (id, developer_id, title, status, updated_at)
VALUES ('{LIVE_PROJECT}', gen_random_uuid(), 'live project', 'Published', now())
ON CONFLICT DO NOTHING;

INSERT INTO catalog.property_object_cards (id, project_id, title, status, updated_at)
SELECT md5('stop-isolation overdue ' || n)::uuid, '{LIVE_PROJECT}'::uuid,
       CASE WHEN n > {CLEAN} AND n % 2 = 0 THEN 'poison' ELSE 'flat' END,
       'Delisted', timestamptz '2000-01-01' + n * interval '1 second'
  FROM generate_series(1, {CLEAN + BATCH_SIZE}) AS n
UNION ALL
SELECT md5('stop-isolation recent ' || n)::uuid, '{LIVE_PROJECT}'::uuid, 'poison', 'Delisted',
       now() - interval '10 days'
  FROM generate_series(1, {NOT_OVERDUE}) AS n
UNION ALL
SELECT md5('stop-isolation published ' || n)::uuid, '{LIVE_PROJECT}'::uuid, 'flat', 'Published',
       timestamptz '2000-01-01'
  FROM generate_series(1, {NOT_OVERDUE}) AS n
ON CONFLICT DO NOTHING;

INSERT INTO catalog.property_object_display_overrides (property_object_id, field, value)
SELECT card.id, 'title', '"shown title"'
  FROM catalog.property_object_cards AS card
 WHERE NOT EXISTS (SELECT FROM catalog.property_object_display_overrides AS o WHERE o.property_object_id = card.id);
"""


@dataclass(frozen=True)
class Trial:
    number: int
    after_refusals: int
    extra_delay: float

    def describe(self) -> str:
        return f"trial {self.number} (SIGTERM after {self.after_refusals} refusals + {self.extra_delay * 1000:.1f} ms)"


def refusals(observer: psycopg.Connection) -> int:
    return observer.execute(f"SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM {REFUSALS}").fetchone()[0]


def restart_refusals() -> None:
    execute(f"ALTER SEQUENCE {REFUSALS} RESTART")


def overdue_ids() -> set:
    return {card for (card,) in query(
        "SELECT id FROM catalog.property_object_cards"
        " WHERE status = 'Delisted' AND updated_at < now() - interval '30 days'"
    )}


def poison_overdue_ids() -> set:
    return {card for (card,) in query(
        "SELECT id FROM catalog.property_object_cards"
        " WHERE title = 'poison' AND status = 'Delisted' AND updated_at < now() - interval '30 days'"
    )}


def purge_isolating() -> subprocess.Popen:
    return start_purge("--json", "--batch-size", str(BATCH_SIZE))


def finished(job: subprocess.Popen) -> tuple[str, str]:
    try:
        return job.communicate(timeout=WAIT_SECONDS)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()


def inconsistencies(before: CatalogState, after: CatalogState, result: dict, overdue: set, poison: set) -> list[str]:
    """What is wrong with the catalog after a stopped run, as sentences; [] when nothing is."""
    problems = []
    gone = before.property_objects - after.property_objects
    if not gone <= overdue:
        problems.append(f"{len(gone - overdue)} card(s) deleted that were not overdue")
    if not poison <= after.property_objects:
        problems.append(f"{len(poison - after.property_objects)} refused card(s) gone")
    if len(gone) != result.get("deleted_property_object_cards"):
        problems.append(f"{len(gone)} cards gone, {result.get('deleted_property_object_cards')} counted as deleted")
    if before.projects != after.projects:
        problems.append("a project card was deleted")
    if not {culprit["card_id"] for culprit in result.get("culprits", [])} <= {str(card) for card in poison}:
        problems.append("a card listed as a culprit is not one the trigger refuses")
    try:
        after.assert_whole_batches_since(before)
    except AssertionError:
        problems.append("overrides do not match their cards (a card without its overrides or the reverse)")
    return problems


def run_trial(trial: Trial, observer: psycopg.Connection, overdue: set, poison: set) -> str | None:
    """One run signalled during its isolation; what went wrong, or None. Prints a line per trial, which pytest shows
    when the test fails."""
    execute(RESTORE_CATALOG)
    restart_refusals()
    before = CatalogState.read()
    job = purge_isolating()
    try:
        due = time.monotonic() + WAIT_SECONDS
        while refusals(observer) < trial.after_refusals:
            if job.poll() is not None or time.monotonic() > due:
                return f"{trial.describe()}: the signal never came due (exit {job.poll()})"
            time.sleep(0.002)
        time.sleep(trial.extra_delay)
        signalled = time.monotonic()
        job.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = job.communicate(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            return f"{trial.describe()}: still running {WAIT_SECONDS}s after the signal"
        took = time.monotonic() - signalled
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    try:
        result = json.loads(stdout)
    except json.JSONDecodeError:
        return f"{trial.describe()}: exit {job.returncode} {took:.1f}s after the signal, no JSON; {stderr[-500:]}"
    print(f"{trial.describe()}: exit {job.returncode} {took:.2f}s after the signal, {result['stop_reason']}/"
          f"{result['outcome']}, {result['deleted_property_object_cards']} deleted, {result['culprit_count']} culprits")
    problems = []
    if took > EXIT_SECONDS:
        problems.append(f"exited {took:.1f}s after the signal")
    if result["culprit_count"] == len(poison):
        # Here an isolation lasts seconds, in production minutes (204 s once): a run that went on to the end of it
        # missed the signal, even when that took less than EXIT_SECONDS.
        problems.append("went on to the end of the isolation (every culprit found)")
    # Culprits found before the signal fail the run (exit 1): cron must hear of them, stopped or not.
    expected = ("stopped", "failed", 1) if result["culprit_count"] else ("stopped", "stopped", 0)
    if (result["stop_reason"], result["outcome"], job.returncode) != expected:
        problems.append(f"ended {result['stop_reason']}/{result['outcome']} (exit {job.returncode}): {result['error']}")
    problems += inconsistencies(before, CatalogState.read(), result, overdue, poison)
    return f"{trial.describe()}: {'; '.join(problems)}" if problems else None


@pytest.fixture
def refusing_catalog():
    execute(f"CREATE SEQUENCE {REFUSALS}")
    try:
        execute(RESTORE_CATALOG)
        with deletes_refused(when=SLOW_REFUSAL, error="card refused by the test"):
            yield
    finally:
        execute(f"DROP SEQUENCE {REFUSALS}")


def test_sigterm_at_random_points_of_a_culprit_isolation_always_ends_the_run_stopped_within_a_second(refusing_catalog):
    overdue, poison = overdue_ids(), poison_overdue_ids()
    assert len(overdue) == CLEAN + BATCH_SIZE and len(poison) == BATCH_SIZE // 2

    with psycopg.connect(database_url_of_tests(), autocommit=True) as observer:
        # One run to its end: how many refusals a whole isolation takes, and that it is what this catalog makes.
        started = time.monotonic()
        stdout, stderr = finished(purge_isolating())
        isolation_refusals, took = refusals(observer), time.monotonic() - started
        whole = json.loads(stdout)
        assert whole["culprit_count"] == len(poison), stderr
        assert whole["deleted_property_object_cards"] == len(overdue) - len(poison), stderr
        assert isolation_refusals > 100, isolation_refusals  # enough statements to land a signal among

        seed = int(os.environ.get("STOP_ISOLATION_SEED") or random.randrange(2**32))
        schedule = random.Random(seed)
        statement = took / isolation_refusals  # an upper bound of one refused statement and the gap after it
        trials = [
            Trial(number, schedule.randint(2, int(isolation_refusals * 0.85)), schedule.uniform(0, statement))
            for number in range(1, TRIALS + 1)
        ]
        failures = [failure for trial in trials if (failure := run_trial(trial, observer, overdue, poison))]

    assert not failures, (
        f"{len(failures)} of {TRIALS} trials failed (STOP_ISOLATION_SEED={seed}; a whole isolation: "
        f"{isolation_refusals} refusals, run {took:.1f}s):\n" + "\n".join(failures)
    )

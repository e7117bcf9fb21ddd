"""The child-process side of the benchmark: `python -m bench.workers job|floor|traffic --database-url URL ...`.

Each worker talks to one database copy, prints exactly one JSON object on stdout and exits. Times are
`time.monotonic()`, which on Linux is one clock for all processes, so the orchestrator can line up the job's
window with the traffic samples of another process.
"""

import argparse
import json
import os
import random
import signal
import sys
import time
from datetime import timedelta

import django
import psycopg

RETENTION = timedelta(days=30)
# The benchmark drains the whole backlog in one run: the per-run limits are not what it measures.
UNLIMITED_BATCHES = 1_000_000
UNLIMITED_DURATION = timedelta(hours=1)
TRAFFIC_SAMPLE_IDS = 2000
TRAFFIC_MAX_SECONDS = 300

FLOOR_PROPERTY_OBJECTS = """
    WITH batch AS (
        SELECT id FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s
         ORDER BY updated_at, id LIMIT %(batch_size)s
           FOR UPDATE SKIP LOCKED
    ), deleted_overrides AS (
        DELETE FROM catalog.property_object_display_overrides
         WHERE property_object_id IN (SELECT id FROM batch)
    )
    DELETE FROM catalog.property_object_cards WHERE id IN (SELECT id FROM batch)
"""
FLOOR_PROJECTS = """
    WITH batch AS (
        SELECT id FROM catalog.project_cards AS project
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s
           AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = project.id)
         ORDER BY updated_at, id LIMIT %(batch_size)s
           FOR UPDATE SKIP LOCKED
    ), deleted_overrides AS (
        DELETE FROM catalog.building_display_overrides WHERE project_id IN (SELECT id FROM batch)
    )
    DELETE FROM catalog.project_cards WHERE id IN (SELECT id FROM batch)
"""


def setup_django(database_url: str) -> None:
    os.environ["DATABASE_URL"] = database_url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    django.setup()


def timed_job(*, database_url: str, batch_size: int, batch_pause_ms: int) -> dict:
    """purge_delisted_cards in this process, timing each batch from the service's own hooks: `should_stop` is
    asked right before a batch (after the pause), `on_batch` is told right after the batch committed."""
    setup_django(database_url)
    from retention.service import purge_delisted_cards  # needs the app registry that setup_django filled

    pause = timedelta(milliseconds=batch_pause_ms)
    asked_at: list[float] = []
    batch_seconds: list[float] = []

    def before_batch() -> bool:
        asked_at.append(time.monotonic())
        return False

    def after_batch(deleted_cards: int) -> None:
        batch_seconds.append(time.monotonic() - asked_at[-1])

    started = time.monotonic()
    result = purge_delisted_cards(
        retention=RETENTION, batch_size=batch_size, max_batches=UNLIMITED_BATCHES,
        max_duration=UNLIMITED_DURATION, batch_pause=pause, should_stop=before_batch, on_batch=after_batch,
    )
    finished = time.monotonic()
    return {
        "started": started,
        "finished": finished,
        "deleted_cards": result.deleted_property_object_cards + result.deleted_project_cards,
        "batch_seconds": batch_seconds,
    }


def timed_floor(*, database_url: str, batch_size: int) -> dict:
    """The fastest batched delete: one autocommitted statement per batch, same predicate, order and batch size,
    both phases, from a plain psycopg connection."""
    batch_seconds: list[float] = []
    deleted_cards = 0
    with psycopg.connect(database_url, autocommit=True) as connection:
        started = time.monotonic()
        cutoff = connection.execute("SELECT now() - %s", [RETENTION]).fetchone()[0]
        for statement in (FLOOR_PROPERTY_OBJECTS, FLOOR_PROJECTS):
            deleted = batch_size
            while deleted == batch_size:
                batch_started = time.monotonic()
                deleted = connection.execute(statement, {"cutoff": cutoff, "batch_size": batch_size}).rowcount
                if deleted:
                    batch_seconds.append(time.monotonic() - batch_started)
                    deleted_cards += deleted
        finished = time.monotonic()
    return {"started": started, "finished": finished, "deleted_cards": deleted_cards, "batch_seconds": batch_seconds}


def live_traffic(*, database_url: str, reads_per_second: int, upserts_per_second: int) -> dict:
    """Paced catalog traffic until SIGTERM (or TRAFFIC_MAX_SECONDS): the public read endpoint's query and source
    upserts of Published property objects. Each sample is (started, kind, seconds)."""
    setup_django(database_url)
    from catalog.models import CardStatus, PropertyObjectCard  # needs the app registry that setup_django filled
    from catalog.operations import upsert_property_object
    from catalog.views import published_or_404

    # A plain flag: a handler calling Event.set() can deadlock on the lock the interrupted Event.wait() holds.
    stop_requested = []
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.append(True))
    cards = list(
        PropertyObjectCard.objects.filter(status=CardStatus.PUBLISHED)
        .order_by("id").values_list("id", "project_id")[:TRAFFIC_SAMPLE_IDS]
    )
    rng = random.Random(5)
    interval = 1 / (reads_per_second + upserts_per_second)
    upsert_share = upserts_per_second / (reads_per_second + upserts_per_second)
    samples = []
    deadline = time.monotonic() + TRAFFIC_MAX_SECONDS
    next_at = time.monotonic()
    print("ready", file=sys.stderr, flush=True)
    while not stop_requested and time.monotonic() < deadline:
        object_id, project_id = rng.choice(cards)
        started = time.monotonic()
        if rng.random() < upsert_share:
            kind = "upsert"
            upsert_property_object(object_id=object_id, project_id=project_id, title=f"Flat {rng.randrange(10**6)}")
        else:
            kind = "read"
            published_or_404(PropertyObjectCard, object_id)
        samples.append((started, kind, time.monotonic() - started))
        # Paced, not closed-loop: live traffic arrives at its own rate. A late request does not cause a burst.
        next_at = max(next_at + interval, time.monotonic())
        time.sleep(max(0.0, next_at - time.monotonic()))
    return {"samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("worker", choices=("job", "floor", "traffic"))
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--batch-pause-ms", type=int, default=0)
    parser.add_argument("--reads-per-second", type=int, default=400)
    parser.add_argument("--upserts-per-second", type=int, default=40)
    args = parser.parse_args()
    if args.worker == "job":
        outcome = timed_job(
            database_url=args.database_url, batch_size=args.batch_size, batch_pause_ms=args.batch_pause_ms
        )
    elif args.worker == "floor":
        outcome = timed_floor(database_url=args.database_url, batch_size=args.batch_size)
    else:
        outcome = live_traffic(
            database_url=args.database_url, reads_per_second=args.reads_per_second,
            upserts_per_second=args.upserts_per_second,
        )
    json.dump(outcome, sys.stdout)


if __name__ == "__main__":
    main()

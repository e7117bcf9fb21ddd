"""The child-process side of the benchmark: `python -m bench.workers WORKER --database-url URL ...`.

Purges: `job` (the service), `floor` (the raw-SQL floor), `naive`, `oneshot`, `sentry` (the peers,
`bench/peers.py`). Background load until SIGTERM: `traffic` (reads and upserts), `restore` (restores of overdue
cards). `admin`: the admin pages, timed.

Each worker talks to one database copy, prints exactly one JSON object on stdout and exits. Times are
`time.monotonic()`, which on Linux is one clock for all processes, so the orchestrator can line up the job's
window with the traffic samples of another process.
"""

import argparse
import json
import os
import random
import resource
import signal
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import django
import psycopg
from psycopg import sql

RETENTION = timedelta(days=30)
# The benchmark drains the whole backlog in one run: the per-run limits are not what it measures.
UNLIMITED_BATCHES = 1_000_000
UNLIMITED_DURATION = timedelta(hours=1)
TRAFFIC_SAMPLE_IDS = 2000
TRAFFIC_MAX_SECONDS = 300
# A run's metrics are not what the bench measures, and in development they would overwrite the checkout's demo run.
NO_METRICS = {"DELISTED_RETENTION_METRICS_TEXTFILE": ""}

# {cards_of_batch} picks the cards to delete from the locked batch: FLOOR_DELETE_BY. A LIMIT of NULL is no limit.
FLOOR_PROPERTY_OBJECTS = """
    WITH batch AS (
        SELECT id, ctid FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s
         ORDER BY updated_at, id LIMIT %(batch_size)s
           FOR UPDATE SKIP LOCKED
    ), deleted_overrides AS (
        DELETE FROM catalog.property_object_display_overrides
         WHERE property_object_id IN (SELECT id FROM batch)
    )
    DELETE FROM catalog.property_object_cards WHERE {cards_of_batch}
"""
# The floor's own `id IN`, or the locked rows' addresses: a TID scan, which visits them in physical (ctid) order.
# A row locked FOR UPDATE keeps its ctid until the statement ends.
FLOOR_DELETE_BY = {
    "id": "id IN (SELECT id FROM batch)",
    "ctid": "ctid = ANY(ARRAY(SELECT ctid FROM batch))",
}
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
    os.environ.update(NO_METRICS)
    from config.tracing import JOB_SERVICE_NAME, configure_tracing

    django.setup()
    # As manage.py does for the job: on only when the environment has OTEL_* variables (section 8).
    configure_tracing(service_name=JOB_SERVICE_NAME)


def timed_job(*, database_url: str, batch_size: int, batch_pause_ms: int, max_batches: int) -> dict:
    """purge_delisted_cards in this process, timing every transaction of the run (the counts, the orphan sweep, the
    batches) from entering it to leaving it: a batch is a writing transaction, and `longest_transaction` bounds every
    row lock the run held. The pause factor, if any, comes from DELISTED_RETENTION_BATCH_PAUSE_FACTOR. The run is
    inside the root span the command opens, so that a traced run (section 8) exports what the command's does."""
    setup_django(database_url)
    # Need the app registry that setup_django filled.
    from retention.limits import PurgeLimits
    from retention.results import Outcome
    from retention.service import job_database, purge_delisted_cards
    from retention.session import JobSession
    from retention.spans import result_attributes, run_attributes, run_span

    batch_seconds: list[float] = []
    transaction_seconds: list[float] = []
    untimed_transaction = JobSession.transaction

    @contextmanager
    def timed_transaction(session, *, writes: bool = False) -> Iterator:
        started = time.monotonic()
        try:
            with untimed_transaction(session, writes=writes) as cursor:
                yield cursor
        finally:
            transaction_seconds.append(time.monotonic() - started)
            if writes:
                batch_seconds.append(transaction_seconds[-1])

    JobSession.transaction = timed_transaction
    limits = PurgeLimits.from_settings().replace(
        retention=RETENTION, batch_size=batch_size, max_batches=max_batches, max_duration=UNLIMITED_DURATION,
        batch_pause=timedelta(milliseconds=batch_pause_ms),
    )
    run_id = uuid.uuid4()
    started, cpu_started = time.monotonic(), cpu_seconds()
    with run_span(run_id) as span:
        span.set_attributes(run_attributes(database=job_database(None), limits=limits, dry_run=False))
        result = purge_delisted_cards(limits, run_id=run_id)
        span.set_attributes(result_attributes(result))
    finished = time.monotonic()
    if result.outcome == Outcome.FAILED:  # a failed run's figures are not the job's
        raise RuntimeError(f"the run failed: {result.error}")
    return {
        "started": started,
        "finished": finished,
        "deleted_cards": result.deleted_property_object_cards + result.deleted_project_cards,
        "batch_seconds": batch_seconds,
        "longest_transaction": max(transaction_seconds),
        "cpu_seconds": cpu_seconds() - cpu_started,
    }


def cpu_seconds() -> float:
    """User and system CPU of this process, all its threads (a span exporter's too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def timed_floor(*, database_url: str, batch_size: int | None, delete_by: str = "id") -> dict:
    """The fastest batched delete: one autocommitted statement per batch, same predicate, order and batch size,
    both phases, from a plain psycopg connection. `batch_size` None deletes each phase in one statement;
    `delete_by` (FLOOR_DELETE_BY) is how the property-object statement finds the batch's cards."""
    batch_seconds: list[float] = []
    statement_seconds: list[float] = []
    deleted_cards = 0
    property_objects = sql.SQL(FLOOR_PROPERTY_OBJECTS).format(cards_of_batch=sql.SQL(FLOOR_DELETE_BY[delete_by]))
    with psycopg.connect(database_url, autocommit=True) as connection:
        started = time.monotonic()
        cutoff = connection.execute("SELECT now() - %s", [RETENTION]).fetchone()[0]
        for statement in (property_objects, FLOOR_PROJECTS):
            while True:
                statement_started = time.monotonic()
                deleted = connection.execute(statement, {"cutoff": cutoff, "batch_size": batch_size}).rowcount
                statement_seconds.append(time.monotonic() - statement_started)
                if deleted:
                    batch_seconds.append(statement_seconds[-1])
                    deleted_cards += deleted
                if batch_size is None or deleted < batch_size:
                    break
        finished = time.monotonic()
    return {
        "started": started, "finished": finished, "deleted_cards": deleted_cards, "batch_seconds": batch_seconds,
        "longest_transaction": max(statement_seconds),
    }


def paced_until_stopped(per_second: float):
    """Yield `per_second` times a second until SIGTERM (or TRAFFIC_MAX_SECONDS); say "ready" on stderr first.

    Paced, not closed-loop: live traffic arrives at its own rate, and a late request does not cause a burst."""
    # A plain flag: a handler calling Event.set() can deadlock on the lock the interrupted Event.wait() holds.
    stop_requested = []
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.append(True))
    interval = 1 / per_second
    deadline = time.monotonic() + TRAFFIC_MAX_SECONDS
    next_at = time.monotonic()
    print("ready", file=sys.stderr, flush=True)
    while not stop_requested and time.monotonic() < deadline:
        yield
        next_at = max(next_at + interval, time.monotonic())
        time.sleep(max(0.0, next_at - time.monotonic()))


def live_traffic(*, database_url: str, reads_per_second: int, upserts_per_second: int) -> dict:
    """Paced catalog traffic: the public read endpoint's query and source upserts of Published property objects.
    Each sample is (started, kind, seconds)."""
    setup_django(database_url)
    from catalog.models import CardStatus, PropertyObjectCard  # needs the app registry that setup_django filled
    from catalog.operations import upsert_property_object
    from catalog.views import published_or_404

    cards = list(
        PropertyObjectCard.objects.filter(status=CardStatus.PUBLISHED)
        .order_by("id").values_list("id", "project_id")[:TRAFFIC_SAMPLE_IDS]
    )
    rng = random.Random(5)
    upsert_share = upserts_per_second / (reads_per_second + upserts_per_second)
    samples = []
    for _ in paced_until_stopped(reads_per_second + upserts_per_second):
        object_id, project_id = rng.choice(cards)
        started = time.monotonic()
        if rng.random() < upsert_share:
            kind = "upsert"
            upsert_property_object(object_id=object_id, project_id=project_id, title=f"Flat {rng.randrange(10**6)}")
        else:
            kind = "read"
            published_or_404(PropertyObjectCard, object_id)
        samples.append((started, kind, time.monotonic() - started))
    return {"samples": samples}


def restores(*, database_url: str, restores_per_second: float) -> dict:
    """Paced source upserts, each restoring the oldest overdue property object still visible: the card a purge
    takes next, so a restore meets the purge's row locks if anything does. Samples as `live_traffic`'s."""
    setup_django(database_url)
    from bench.peers import database_cutoff  # needs the app registry that setup_django filled
    from catalog.models import CardStatus, PropertyObjectCard
    from catalog.operations import ProjectCardNotFound, upsert_property_object

    oldest_overdue = (
        PropertyObjectCard.objects.filter(status=CardStatus.DELISTED, updated_at__lt=database_cutoff(RETENTION))
        .order_by("updated_at", "id").values_list("id", "project_id")
    )
    samples = []
    for _ in paced_until_stopped(restores_per_second):
        card = oldest_overdue.first()
        if card is None:
            continue
        started = time.monotonic()
        try:
            upsert_property_object(object_id=card[0], project_id=card[1], title="Restored by the source")
        except ProjectCardNotFound:
            pass  # its project was purged while the upsert waited: the wait is what is measured
        samples.append((started, "restore", time.monotonic() - started))
    return {"samples": samples}


RETENTION_PAGE = "Delisted retention backlog"


def admin_pages(*, database_url: str, repeats: int) -> dict:
    """Time the admin pages a staff member opens, through Django's test client (the whole request: middleware,
    queries, templates), `repeats` rounds after one warm-up round. Every page must answer 200."""
    setup_django(database_url)
    from django.contrib import admin  # needs the app registry that setup_django filled
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from catalog.models import CardStatus, ProjectCard, PropertyObjectCard

    def deepest_page(model) -> int:
        """The deepest page the list offers: EstimatedCountPaginator.max_pages, or the last where there are fewer."""
        model_admin = admin.site.get_model_admin(model)
        return model_admin.get_paginator(None, model.objects.all(), model_admin.list_per_page).num_pages

    objects = reverse("admin:catalog_propertyobjectcard_changelist")
    projects = reverse("admin:catalog_projectcard_changelist")
    delisted_card = (
        PropertyObjectCard.objects.filter(status=CardStatus.DELISTED).order_by("updated_at", "id")
        .values_list("id", flat=True).first()
    )
    object_page, project_page = deepest_page(PropertyObjectCard), deepest_page(ProjectCard)
    retention_page = reverse("admin:catalog_delistedretention_changelist")
    pages = [
        ("admin index", reverse("admin:index")),
        (RETENTION_PAGE, retention_page),
        ("property-object cards, first page", objects),
        (f"property-object cards, page {object_page}", f"{objects}?p={object_page}"),
        ("project cards, first page", projects),
        (f"project cards, page {project_page}", f"{projects}?p={project_page}"),
        ("property-object cards, status Delisted", f"{objects}?status__exact={CardStatus.DELISTED}"),
        ("property-object cards, overdue (counted exactly)", f"{objects}?deletion=overdue"),
        ("a Delisted property-object card", reverse("admin:catalog_propertyobjectcard_change", args=[delisted_card])),
    ]
    client = Client(HTTP_HOST="localhost")
    client.force_login(get_user_model().objects.create_superuser("bench-staff", password=None))
    seconds = {label: [] for label, _ in pages}
    for round_index in range(1 + repeats):
        for label, path in pages:
            started = time.monotonic()
            response = client.get(path)
            elapsed = time.monotonic() - started
            if response.status_code != 200:
                raise RuntimeError(f"{label} ({path}) answered {response.status_code}")
            if round_index:  # the first round warms caches and connections up
                seconds[label].append(elapsed)
    # The report names the page, not the card of this run.
    return {"pages": [(label, path.replace(str(delisted_card), "<id>"), seconds[label]) for label, path in pages]}


PEERS = ("naive", "oneshot", "sentry")


def batch_size_option(value: str) -> int | None:
    return None if value == "all" else int(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("worker", choices=("job", "floor", *PEERS, "traffic", "restore", "admin"))
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--batch-size", type=batch_size_option, default=2000,
                        help="floor: `all` for one statement a phase")
    parser.add_argument("--delete-by", choices=FLOOR_DELETE_BY, default="id", help="floor: FLOOR_DELETE_BY")
    parser.add_argument("--batch-pause-ms", type=int, default=0)
    parser.add_argument("--max-batches", type=int, default=UNLIMITED_BATCHES, help="job: stop after this many")
    parser.add_argument("--reads-per-second", type=int, default=400)
    parser.add_argument("--upserts-per-second", type=int, default=40)
    parser.add_argument("--restores-per-second", type=float, default=10)
    parser.add_argument("--repeats", type=int, default=10, help="admin: timed rounds over the pages")
    args = parser.parse_args()
    if args.worker == "job":
        outcome = timed_job(
            database_url=args.database_url, batch_size=args.batch_size, batch_pause_ms=args.batch_pause_ms,
            max_batches=args.max_batches,
        )
    elif args.worker == "floor":
        outcome = timed_floor(database_url=args.database_url, batch_size=args.batch_size, delete_by=args.delete_by)
    elif args.worker in PEERS:
        setup_django(args.database_url)
        from bench import peers  # needs the app registry that setup_django filled

        if args.worker == "naive":
            outcome = peers.naive_django(retention=RETENTION, batch_size=args.batch_size)
        elif args.worker == "oneshot":
            outcome = peers.one_shot(retention=RETENTION)
        else:
            outcome = peers.autocommit_loop(
                database_url=args.database_url, retention=RETENTION, batch_size=args.batch_size
            )
    elif args.worker == "traffic":
        outcome = live_traffic(
            database_url=args.database_url, reads_per_second=args.reads_per_second,
            upserts_per_second=args.upserts_per_second,
        )
    elif args.worker == "restore":
        outcome = restores(database_url=args.database_url, restores_per_second=args.restores_per_second)
    else:
        outcome = admin_pages(database_url=args.database_url, repeats=args.repeats)
    json.dump(outcome, sys.stdout)


if __name__ == "__main__":
    main()

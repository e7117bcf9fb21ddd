"""The benchmark's databases: template databases seeded with demo data, and fresh copies of them for each run.

The templates are demo data (`manage.py seed_demo_data`) whose backlog is then set to an exact size (see
`set_backlog`). The millions of cards of the large templates are seeded into tables without their indexes, which
are built once afterwards (`catalog_indexes_dropped`). A copy is `CREATE DATABASE ... TEMPLATE`, so the job and
the floor, or two runs of the job, meet identical data. All databases are named `<prefix>_*`; the caller drops
them at the end.
"""

import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

from bench.workers import RETENTION

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parent.parent
OBJECTS_PER_PROJECT = 50
SEED = 5
PARTIAL_INDEXES = (
    "catalog.property_object_cards_delisted_updated_at_idx",
    "catalog.project_cards_delisted_updated_at_idx",
)
WORKER_TIMEOUT_SECONDS = 600

# Delisted cards past the `keep` oldest overdue property objects move into the restore window (1..21 days ago),
# in the same order and with the same shared moments, so a project and its cascaded objects stay equal (INV-5,
# docs/contract.md).
TRIM_BACKLOG = """
WITH boundary AS (
    SELECT updated_at AS first_kept_out, now() - %(retention)s AS cutoff
      FROM catalog.property_object_cards
     WHERE status = 'Delisted' AND updated_at < now() - %(retention)s
     ORDER BY updated_at, id OFFSET %(keep)s LIMIT 1
)
UPDATE {cards} AS card
   SET updated_at = boundary.cutoff + interval '1 day'
                    + (card.updated_at - boundary.first_kept_out)
                      / extract(epoch FROM boundary.cutoff - boundary.first_kept_out)
                      * extract(epoch FROM interval '20 days')
  FROM boundary
 WHERE card.status = 'Delisted' AND card.updated_at >= boundary.first_kept_out AND card.updated_at < boundary.cutoff
"""
# The other way: when the demo mix has fewer overdue cards than asked for, the `overdue` oldest Delisted property
# objects become overdue by compressing their moments, from the oldest one up to the first left out, into the time
# before the cutoff; again in order, shared moments kept, and never before the oldest (so after `created_at`).
AGE_BACKLOG = """
WITH boundary AS (
    SELECT (SELECT min(updated_at) FROM catalog.property_object_cards WHERE status = 'Delisted') AS oldest,
           updated_at AS first_left_out, now() - %(retention)s - interval '1 hour' AS overdue_until
      FROM catalog.property_object_cards
     WHERE status = 'Delisted'
     ORDER BY updated_at, id OFFSET %(overdue)s LIMIT 1
)
UPDATE {cards} AS card
   SET updated_at = boundary.oldest
                    + (card.updated_at - boundary.oldest)
                      / extract(epoch FROM boundary.first_left_out - boundary.oldest)
                      * extract(epoch FROM boundary.overdue_until - boundary.oldest)
  FROM boundary
 WHERE card.status = 'Delisted' AND card.updated_at < boundary.first_left_out
"""
# Every primary key, unique constraint and index of the catalog schema, as the statement dropping it and the one
# building it again (constraints first: nothing else depends on the order).
CATALOG_INDEXES = """
SELECT format('ALTER TABLE %s DROP CONSTRAINT %I', conrelid::regclass, conname),
       format('ALTER TABLE %s ADD CONSTRAINT %I %s', conrelid::regclass, conname, pg_get_constraintdef(oid)),
       1 AS building_order
  FROM pg_constraint
 WHERE connamespace = 'catalog'::regnamespace AND contype IN ('p', 'u')
UNION ALL
SELECT format('DROP INDEX %s', indexrelid::regclass), pg_get_indexdef(indexrelid), 2
  FROM pg_index
 WHERE indrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'catalog'::regnamespace)
   AND NOT EXISTS (SELECT FROM pg_constraint WHERE conindid = indexrelid)
 ORDER BY building_order
"""
# A primary key over ten million uuids sorts some 400 MB: in the default 64MB the sort spills to disk.
INDEX_BUILD_MEMORY = "1GB"
COUNT_OVERDUE_OBJECTS = """
SELECT count(*) FROM catalog.property_object_cards WHERE status = 'Delisted' AND updated_at < now() - %s
"""
COUNT_CARDS = "SELECT count(*) FROM catalog.property_object_cards"


def database_url(base_url: str, name: str) -> str:
    return urlunsplit(urlsplit(base_url)._replace(path=f"/{name}"))


def create_database(base_url: str, name: str, *, template: str | None = None) -> str:
    drop_database(base_url, name)
    statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
    if template:
        # FILE_COPY checkpoints instead of writing the copy through the WAL: the timed run after it does not
        # pay for a checkpoint triggered by the copy.
        statement = sql.SQL("CREATE DATABASE {} TEMPLATE {} STRATEGY FILE_COPY").format(
            sql.Identifier(name), sql.Identifier(template)
        )
    with psycopg.connect(database_url(base_url, "postgres"), autocommit=True) as admin:
        admin.execute(statement)
    return database_url(base_url, name)


def drop_database(base_url: str, name: str) -> None:
    with psycopg.connect(database_url(base_url, "postgres"), autocommit=True) as admin:
        admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def manage(url: str, *args: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", *args], cwd=PROJECT_ROOT, env=os.environ | {"DATABASE_URL": url},
        capture_output=True, check=True, timeout=WORKER_TIMEOUT_SECONDS,
    )


def migrated_database(base_url: str, name: str) -> str:
    url = create_database(base_url, name)
    manage(url, "migrate", "--noinput", "-v", "0")
    return url


def seed_demo_data(url: str, *, cards: int, seed: int) -> None:
    """Add demo data (the catalog is not emptied first): `cards` property objects, 50 per project."""
    manage(
        url, "seed_demo_data", "--projects", str(math.ceil(cards / OBJECTS_PER_PROJECT)),
        "--objects-per-project", str(OBJECTS_PER_PROJECT), "--seed", str(seed),
    )


def set_backlog(url: str, *, overdue: int) -> None:
    """Make exactly the `overdue` oldest Delisted property objects overdue, give or take one cascade's shared
    moment (`overdue=0` leaves none): trim the demo mix's backlog, or age more of its Delisted cards."""
    with psycopg.connect(url) as connection:
        natural = connection.execute(COUNT_OVERDUE_OBJECTS, [RETENTION]).fetchone()[0]
        statement, params = (
            (TRIM_BACKLOG, {"retention": RETENTION, "keep": overdue}) if overdue <= natural
            else (AGE_BACKLOG, {"retention": RETENTION, "overdue": overdue})
        )
        for table in ("property_object_cards", "project_cards"):
            connection.execute(sql.SQL(statement).format(cards=sql.Identifier("catalog", table)), params)


def catalog_indexes_dropped(url: str) -> list[str]:
    """Drop the catalog's indexes and keys; return the statements that build them again (`build_indexes`)."""
    with psycopg.connect(url) as connection:
        statements = connection.execute(CATALOG_INDEXES).fetchall()
        for drop, _, _ in statements:
            connection.execute(drop)
    return [build for _, build, _ in statements]


def build_indexes(url: str, statements: list[str]) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(INDEX_BUILD_MEMORY)))
        for statement in statements:
            connection.execute(statement)


def settle(url: str) -> int:
    """Vacuum and analyze, as autovacuum would have by the night of the run; return the backlog (overdue
    property objects)."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM (ANALYZE)")
        return connection.execute(COUNT_OVERDUE_OBJECTS, [RETENTION]).fetchone()[0]


def table_size(url: str) -> int:
    with psycopg.connect(url) as connection:
        return connection.execute(COUNT_CARDS).fetchone()[0]


def drop_partial_indexes(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        for index in PARTIAL_INDEXES:
            connection.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(*index.split("."))))


def seeded_catalog(base_url: str, name: str, *, cards: int, overdue: int, seed: int) -> int:
    """A template of its own: `cards` property objects seeded without indexes, `overdue` of them overdue; return
    the backlog."""
    logger.info("template %s: %s property objects, backlog %s", name, f"{cards:,}", f"{overdue:,}")
    url = migrated_database(base_url, name)
    indexes = catalog_indexes_dropped(url)
    seed_demo_data(url, cards=cards, seed=seed)
    set_backlog(url, overdue=overdue)
    build_indexes(url, indexes)
    return settle(url)


def prepare_templates(base_url: str, names: dict[str, str], args) -> tuple[dict[str, int], dict[str, int]]:
    """Seed the templates; return (property-object cards, overdue property objects) per template.

    small: the small demo catalog, its whole natural backlog. large: a catalog of the rest of the cards with no
    backlog (all of it moved into the restore window), and the small catalog seeded on top with the same seed,
    so the same backlog in the same physical shape sits in a larger table: only the table size changes.
    backlog_large: the same large demo catalog (the rest of the cards) with the large backlog, spread thin over the
    whole table. backlog_small, peers, admin: catalogs of their own size and backlog (the small throughput, the
    peers, the admin pages).
    """
    logger.info("template %s: %s property objects", names["small"], f"{args.small_cards:,}")
    small_url = migrated_database(base_url, names["small"])
    seed_demo_data(small_url, cards=args.small_cards, seed=SEED)
    backlogs = {"small": settle(small_url)}

    logger.info("seeding %s property objects without indexes", f"{args.large_cards - args.small_cards:,}")
    large_url = migrated_database(base_url, names["large"])
    indexes = catalog_indexes_dropped(large_url)
    seed_demo_data(large_url, cards=args.large_cards - args.small_cards, seed=SEED + 1)
    backlog_url = create_database(base_url, names["backlog_large"], template=names["large"])
    for url, name, overdue in ((backlog_url, "backlog_large", args.backlogs[1]), (large_url, "large", 0)):
        logger.info("template %s: backlog %s, building the indexes", names[name], f"{overdue:,}")
        set_backlog(url, overdue=overdue)
        build_indexes(url, indexes)
    backlogs["backlog_large"] = settle(backlog_url)
    logger.info("template %s: the small catalog on top of a backlog-free one", names["large"])
    seed_demo_data(large_url, cards=args.small_cards, seed=SEED)
    backlogs["large"] = settle(large_url)

    for name, cards, overdue, seed in (
        ("admin", args.admin_cards, args.admin_backlog, SEED + 2),
        ("backlog_small", args.small_throughput_cards, args.small_throughput_backlog, SEED + 3),
        ("peers", args.peer_cards, args.peer_backlog, SEED + 4),
    ):
        backlogs[name] = seeded_catalog(base_url, names[name], cards=cards, overdue=overdue, seed=seed)
    sizes = {name: table_size(database_url(base_url, names[name])) for name in backlogs}
    return sizes, backlogs


def server_description(base_url: str) -> str:
    with psycopg.connect(database_url(base_url, "postgres")) as connection:
        version = connection.execute("SHOW server_version").fetchone()[0]
        shared_buffers = connection.execute("SHOW shared_buffers").fetchone()[0]
    return f"PostgreSQL {version.split()[0]} (shared_buffers {shared_buffers})"

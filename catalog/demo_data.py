"""Demo data for the catalog: a realistic mix made by a few set-based statements (INSERT ... SELECT over
generate_series, never row by row), so that a million property objects take well under a minute.

The mix is what the retention job (`purge_delisted`) meets in production: cards Delisted long ago (its work),
cards Delisted recently (inside the restore window: they must survive), Published and Hidden cards, display
overrides both live and soft-deleted, and ranking rules, some of them pointing at Delisted projects (the job must
leave those alone). The rows look as the source-event consumers would have left them: a Delisted card's
`updated_at` is its delisting moment, and every object of a Delisted project is Delisted with the project's own
`updated_at` (the INV-5 cascade, docs/contract.md).

Demo data must never land in, and a reset must never empty, a real catalog. Nothing is seeded with
APP_ENV=production, and elsewhere only into a demo catalog: one whose every row is demo data, an empty catalog
included (`is_demo_catalog`). The rows are recognised, not a marker that a copy, a restored schema dump or a real
card added later would leave behind. Every uuid the demo makes (card ids, developer ids) is a demo id: 16 hex
digits from gen_random_uuid() (with the version digit of RFC 9562's custom uuids, 8), then the variant digit 8 and
15 hex digits of md5(DEMO_ID_KEY || those 16 digits). So a demo id proves itself from its own digits: a uuid made
by any generator (version 4 or 7, as the source system's are) never passes, a custom one with a chance of 2^-62,
and updating a demo card (its status, its updated_at) keeps it a demo card. A demo row is a card with a demo id,
an override of a card with a demo id, a ranking rule of a demo developer (and of a demo project, if any).

The check and the writes are one transaction behind a table lock that keeps writers out from before the check
until the commit: a real card committed while a reset waits for its lock is seen by the check, never truncated.

gen_random_uuid() is not driven by `setseed()`: the same seed on an emptied catalog gives the same mix (the same
counts), with fresh ids, and seeding a demo catalog without a reset adds to what is there.
"""

import logging
import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, transaction

from catalog.models import CardStatus

logger = logging.getLogger(__name__)

DEMO_ID_KEY = "catalog.demo_data: demo ids"
# 16 hex digits of a fresh uuid: a subquery's column, so that one value makes both halves of a demo id (a
# volatile select list keeps the subquery from being flattened into two gen_random_uuid() calls).
FRESH_HEX = "left(replace(gen_random_uuid()::text, '-', ''), 16)"


def demo_id(sixteen_hex: str) -> str:
    """SQL of the demo id made of the text expression `sixteen_hex` (16 hex digits; see the module's docstring).
    It takes the parameter %(demo_id_key)s."""
    first_half = f"overlay({sixteen_hex} placing '8' from 13)"
    return f"({first_half} || '8' || left(md5(%(demo_id_key)s || {first_half}), 15))::uuid"


def is_demo_id(column: str) -> str:
    """SQL: the uuid `column` is a demo id, its second half made from its first."""
    first_sixteen_hex = f"left(replace({column}::text, '-', ''), 16)"
    return f"{demo_id(first_sixteen_hex)} = {column}"


IS_DEMO_CATALOG = f"""
SELECT NOT EXISTS (SELECT FROM catalog.project_cards WHERE NOT {is_demo_id("id")})
   AND NOT EXISTS (SELECT FROM catalog.property_object_cards WHERE NOT {is_demo_id("id")})
   AND NOT EXISTS (SELECT FROM catalog.property_object_display_overrides WHERE NOT {is_demo_id("property_object_id")})
   AND NOT EXISTS (SELECT FROM catalog.building_display_overrides WHERE NOT {is_demo_id("project_id")})
   AND NOT EXISTS (SELECT FROM catalog.ranking_rules
                    WHERE NOT ({is_demo_id("developer_id")} AND (project_id IS NULL OR {is_demo_id("project_id")})))
"""

REFUSED_IN_PRODUCTION = (
    "refusing to seed demo data with APP_ENV=production: demo cards never go into a production catalog; "
    "run it against a development database (APP_ENV=development)"
)
REFUSED_REAL_CATALOG = (
    "refusing to seed demo data into database {database}: its catalog holds rows that seed_demo_data did not make "
    "(a real catalog is never emptied nor mixed with demo cards); point DATABASE_URL at an empty database"
)

CATALOG_TABLES = """catalog.project_cards, catalog.property_object_cards, catalog.property_object_display_overrides,
           catalog.building_display_overrides, catalog.ranking_rules"""
# Taken before the check, so that no writer can commit a row between the check and the commit. A reset takes at
# once the ACCESS EXCLUSIVE lock its TRUNCATE needs: upgrading a weaker lock later could deadlock with a
# transaction that read a table and then writes to it. Seeding alone keeps writers out and lets readers in (SHARE
# ROW EXCLUSIVE conflicts with itself, so two seedings also wait for each other).
LOCK_CATALOG_FOR_RESET = f"LOCK TABLE {CATALOG_TABLES} IN ACCESS EXCLUSIVE MODE"
LOCK_CATALOG_FOR_SEEDING = f"LOCK TABLE {CATALOG_TABLES} IN SHARE ROW EXCLUSIVE MODE"
TRUNCATE_CATALOG = f"TRUNCATE {CATALOG_TABLES} RESTART IDENTITY"

# This run's projects, kept aside so that every later statement works on them alone (and not on cards an earlier
# run left behind), and so that their objects can copy the project's status and moment.
CREATE_SEEDED_PROJECTS = f"""
CREATE TEMPORARY TABLE seeded_projects AS
WITH developers AS MATERIALIZED (
    SELECT d, {demo_id("fresh_hex")} AS developer_id
      FROM (SELECT d, {FRESH_HEX} AS fresh_hex FROM generate_series(0, %(developers)s - 1) AS d) AS numbered
)
SELECT {demo_id("fresh_hex")} AS id,
       n,
       developers.developer_id,
       'Residential complex ' || n AS title,
       -- The status follows the position, not random(), so that even a small catalog holds every kind: of every
       -- 20 projects, 2 were delisted long ago, 1 recently, 2 are Hidden and 15 Published.
       CASE WHEN mod(n, 20) < 3 THEN 'Delisted' WHEN mod(n, 20) < 5 THEN 'Hidden' ELSE 'Published' END AS status,
       -- Before any delisting below, so that created_at <= updated_at for the projects and their objects.
       now() - (400 + random() * 400) * interval '1 day' AS created_at,
       now() - CASE WHEN mod(n, 20) < 2 THEN 31 + random() * 369  -- past the retention period: the job's work
                    WHEN mod(n, 20) = 2 THEN 1 + random() * 19    -- inside the restore window: must survive
                    ELSE random() * 14                            -- live cards: the source refreshes them often
               END * interval '1 day' AS updated_at
  FROM (SELECT n, {FRESH_HEX} AS fresh_hex FROM generate_series(1, %(projects)s) AS n) AS numbered
  JOIN developers ON developers.d = mod(n, %(developers)s)
"""

INSERT_PROJECT_CARDS = """
INSERT INTO catalog.project_cards (id, developer_id, title, status, created_at, updated_at)
SELECT id, developer_id, title, status, created_at, updated_at FROM seeded_projects
"""

INSERT_PROPERTY_OBJECT_CARDS = f"""
INSERT INTO catalog.property_object_cards (id, project_id, title, status, price, created_at, updated_at)
SELECT {demo_id("fresh_hex")},
       project_id,
       'Flat ' || k,
       CASE WHEN project_status = 'Delisted' OR roll < 0.12 THEN 'Delisted'
            WHEN roll < 0.17 THEN 'Hidden'
            ELSE 'Published'
       END,
       round((3000000 + random() * 47000000)::numeric, -3),
       project_created_at,
       CASE WHEN project_status = 'Delisted' THEN project_updated_at  -- INV-5: the cascade's one moment
            ELSE now() - CASE WHEN roll < 0.08 THEN 31 + random() * 369
                              WHEN roll < 0.12 THEN 1 + random() * 19
                              ELSE random() * 14
                         END * interval '1 day'
       END
  FROM (
        -- One roll per object decides its fate inside a live project: of every 100 objects about 8 were
        -- delisted long ago, 4 recently, and 5 are Hidden. A volatile select list keeps this subquery from
        -- being flattened, so `roll` is one value per object however often it is read.
        SELECT p.id AS project_id, p.status AS project_status, p.created_at AS project_created_at,
               p.updated_at AS project_updated_at, k, random() AS roll, {FRESH_HEX} AS fresh_hex
          FROM seeded_projects AS p
         CROSS JOIN generate_series(1, %(objects_per_project)s) AS k
       ) AS objects
"""

# After the objects, so that an override always has its card; a few were withdrawn by the editors (soft-deleted),
# and the retention job must delete those with their card too. Each was written halfway through its card's life
# so far, so that most are older than the job's orphan sweep window, as in production (not with random(): one more
# call per row would make the mix depend on the plan's row order).
INSERT_PROPERTY_OBJECT_DISPLAY_OVERRIDES = """
INSERT INTO catalog.property_object_display_overrides
       (property_object_id, field, value, is_deleted, created_at, updated_at)
SELECT o.id, 'title', to_jsonb(o.title || ', sea view'), random() < 0.3,
       o.created_at + (o.updated_at - o.created_at) / 2, o.created_at + (o.updated_at - o.created_at) / 2
  FROM catalog.property_object_cards AS o
  JOIN seeded_projects AS p ON p.id = o.project_id
 WHERE random() < 0.1
"""

INSERT_BUILDING_DISPLAY_OVERRIDES = """
INSERT INTO catalog.building_display_overrides
       (project_id, building_code, field, value, is_deleted, created_at, updated_at)
SELECT p.id, 'B' || b, 'name', to_jsonb(p.title || ', building ' || b), random() < 0.25,
       p.created_at + (p.updated_at - p.created_at) / 2, p.created_at + (p.updated_at - p.created_at) / 2
  FROM seeded_projects AS p
 CROSS JOIN generate_series(1, 2) AS b
 WHERE random() < 0.3
"""

# A developer-wide rule for every developer, and a rule of its own for every third project. 3 and 20 are coprime,
# so those projects include Delisted ones: their rules outlive the cards, ready for a restore.
INSERT_RANKING_RULES = """
INSERT INTO catalog.ranking_rules (developer_id, project_id, weight)
SELECT developer_id, NULL, floor(random() * 201)::int - 100
  FROM (SELECT DISTINCT developer_id FROM seeded_projects) AS developers
 UNION ALL
SELECT developer_id, id, floor(random() * 201)::int - 100
  FROM seeded_projects
 WHERE mod(n, 3) = 0
"""

COUNT_SEEDED_PROJECT_CARDS = """
SELECT c.status, count(*), count(*) FILTER (WHERE c.status = 'Delisted' AND c.updated_at < now() - %(retention)s)
  FROM catalog.project_cards AS c
  JOIN seeded_projects AS p ON p.id = c.id
 GROUP BY c.status
"""

COUNT_SEEDED_PROPERTY_OBJECT_CARDS = """
SELECT o.status, count(*), count(*) FILTER (WHERE o.status = 'Delisted' AND o.updated_at < now() - %(retention)s)
  FROM catalog.property_object_cards AS o
  JOIN seeded_projects AS p ON p.id = o.project_id
 GROUP BY o.status
"""

# Fresh statistics, so that a purge run right after seeding is planned for a million rows, not for an empty table.
ANALYZE_CATALOG = f"ANALYZE {CATALOG_TABLES}"


class DemoDataRefused(Exception):
    """Seeding was refused before anything changed: production, or a catalog that is not a demo catalog."""


@dataclass(frozen=True)
class DemoDataSummary:
    """What one seeding added. Overdue cards are Delisted longer than the retention period: what purge_delisted
    would delete now."""

    project_cards: int
    project_cards_by_status: dict[str, int]
    overdue_project_cards: int
    property_object_cards: int
    property_object_cards_by_status: dict[str, int]
    overdue_property_object_cards: int
    property_object_display_overrides: int
    building_display_overrides: int
    ranking_rules: int


def seed_demo_data(*, projects: int, objects_per_project: int, reset: bool, seed: int | None) -> DemoDataSummary:
    """Add `projects` project cards with `objects_per_project` property objects each, their overrides and ranking
    rules, in one transaction; with `reset`, empty the catalog first. Raises DemoDataRefused in production and on
    a catalog that is not a demo catalog (`is_demo_catalog`), with or without `reset`."""
    if settings.PRODUCTION:
        raise DemoDataRefused(REFUSED_IN_PRODUCTION)
    retention = timedelta(days=settings.DELISTED_RETENTION_PERIOD_DAYS)
    started = time.monotonic()
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(LOCK_CATALOG_FOR_RESET if reset else LOCK_CATALOG_FOR_SEEDING)
        if not is_demo_catalog():
            raise DemoDataRefused(REFUSED_REAL_CATALOG.format(database=connection.settings_dict["NAME"]))
        logger.info("seeding %d projects with %d property objects each", projects, objects_per_project)
        if reset:
            cursor.execute(TRUNCATE_CATALOG)
            logger.info("emptied the catalog")
        if seed is not None:
            # setseed() takes a number in [-1, 1].
            cursor.execute("SELECT setseed(%s)", [(seed % 2**31) / 2**31])
        execute_step(
            cursor,
            "chose this run's projects",
            CREATE_SEEDED_PROJECTS,
            {"projects": projects, "developers": max(1, projects // 10), "demo_id_key": DEMO_ID_KEY},
        )
        execute_step(cursor, "inserted project cards", INSERT_PROJECT_CARDS)
        execute_step(
            cursor,
            "inserted property object cards",
            INSERT_PROPERTY_OBJECT_CARDS,
            {"objects_per_project": objects_per_project, "demo_id_key": DEMO_ID_KEY},
        )
        property_object_display_overrides = execute_step(
            cursor, "inserted property object display overrides", INSERT_PROPERTY_OBJECT_DISPLAY_OVERRIDES
        )
        building_display_overrides = execute_step(
            cursor, "inserted building display overrides", INSERT_BUILDING_DISPLAY_OVERRIDES
        )
        ranking_rules = execute_step(cursor, "inserted ranking rules", INSERT_RANKING_RULES)
        project_cards_by_status, overdue_project_cards = count_by_status(
            cursor, COUNT_SEEDED_PROJECT_CARDS, retention
        )
        property_object_cards_by_status, overdue_property_object_cards = count_by_status(
            cursor, COUNT_SEEDED_PROPERTY_OBJECT_CARDS, retention
        )
        # Dropped here, not ON COMMIT: inside a caller's transaction (a test) a second seeding must create it anew.
        cursor.execute("DROP TABLE seeded_projects")
        cursor.execute(ANALYZE_CATALOG)
    logger.info("seeding committed in %.1f s", time.monotonic() - started)
    return DemoDataSummary(
        project_cards=sum(project_cards_by_status.values()),
        project_cards_by_status=project_cards_by_status,
        overdue_project_cards=overdue_project_cards,
        property_object_cards=sum(property_object_cards_by_status.values()),
        property_object_cards_by_status=property_object_cards_by_status,
        overdue_property_object_cards=overdue_property_object_cards,
        property_object_display_overrides=property_object_display_overrides,
        building_display_overrides=building_display_overrides,
        ranking_rules=ranking_rules,
    )


def is_demo_catalog(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether every row of the catalog on database `using` is demo data (see the module's docstring): true for an
    empty catalog, false as soon as one card, override or ranking rule is not. The rule `--reset` empties by; as of
    the moment of the query, unless the caller holds a lock that keeps writers out, as seeding does."""
    with connections[using].cursor() as cursor:
        cursor.execute(IS_DEMO_CATALOG, {"demo_id_key": DEMO_ID_KEY})
        return cursor.fetchone()[0]


def execute_step(cursor, description: str, statement: str, params: dict | None = None) -> int:
    """Run one statement that makes rows; log how many and how long it took."""
    started = time.monotonic()
    cursor.execute(statement, params)
    logger.info("%s: %d rows in %.1f s", description, cursor.rowcount, time.monotonic() - started)
    return cursor.rowcount


def count_by_status(cursor, statement: str, retention: timedelta) -> tuple[dict[str, int], int]:
    """Cards per status (every status present, zero included) and how many of them are overdue."""
    cursor.execute(statement, {"retention": retention})
    by_status = dict.fromkeys(CardStatus.values, 0)
    overdue = 0
    for status, count, overdue_count in cursor.fetchall():
        by_status[status] = count
        overdue += overdue_count
    return by_status, overdue

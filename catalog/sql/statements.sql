-- Every statement the Delisted retention page sends beside the job's own (retention/sql/statements.sql, whose backlog
-- counts it reads too), written the same way: `-- name:` starts a statement and names its database span; a comment
-- at the start of a line is for the reader and is not sent (config.statements). Why each is shaped so:
-- docs/how-it-works.md, "The backlog counts".

-- name: page reads in one process
-- The page's reads share one transaction (catalog.admin.retention_page.PageReads): the planner's parallel workers
-- doubled the object count's time on 2 busy cores, and a page load should not take cores from the job and the site.
SELECT set_config('max_parallel_workers_per_gather', '0', true);

-- name: becoming deletable
-- The Delisted cards that become deletable on each of the next `days` days of `time_zone` (the catalog's), from now
-- on: their updated_at + retention falls in that day and after the cutoff. A range count per day and kind; then, in a
-- last row without a day, the cards becoming deletable after those days. The rows together are every card within the
-- retention window, which the page's backlog does not count again. The days are the zone's midnights, written with
-- AT TIME ZONE rather than set on the session: the other reads of the page's transaction return moments, which
-- Django reads as UTC.
WITH days AS (
    SELECT day::date, greatest((day AT TIME ZONE %(time_zone)s) - %(retention)s, %(cutoff)s) AS updated_from,
           ((day + interval '1 day') AT TIME ZONE %(time_zone)s) - %(retention)s AS updated_before
      FROM generate_series(date_trunc('day', (%(cutoff)s + %(retention)s) AT TIME ZONE %(time_zone)s),
                           date_trunc('day', (%(cutoff)s + %(retention)s) AT TIME ZONE %(time_zone)s)
                           + (%(days)s - 1) * interval '1 day',
                           interval '1 day') AS day
)
SELECT day,
       (SELECT count(*) FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND updated_at >= updated_from AND updated_at < updated_before),
       (SELECT count(*) FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at >= updated_from AND updated_at < updated_before)
  FROM days
 UNION ALL
SELECT NULL,
       (SELECT count(*) FROM catalog.property_object_cards WHERE status = 'Delisted' AND updated_at >= updated_from),
       (SELECT count(*) FROM catalog.project_cards WHERE status = 'Delisted' AND updated_at >= updated_from)
  FROM (SELECT max(updated_before) AS updated_from FROM days) AS later
 ORDER BY day NULLS LAST;

-- name: held back now and after
-- The overdue projects held back now, and once every overdue object is gone ("held back after" of the job's
-- statements, without a boundary), in one index probe a project: its last object in (status, updated_at) order is at or after
-- ('Delisted', cutoff) exactly when it has an object in the second or third range of "held back after"; the first,
-- a status before 'Delisted' (the CHECK admits none), is one look for all the projects.
SELECT count(last.status),
       count(*) FILTER (
           WHERE (last.status, last.updated_at) >= ('Delisted', %(cutoff)s)
              OR card.id IN (SELECT project_id FROM catalog.property_object_cards WHERE status < 'Delisted'))
  FROM catalog.project_cards AS card
  LEFT JOIN LATERAL (
      SELECT po.status, po.updated_at FROM catalog.property_object_cards AS po
       WHERE po.project_id = card.id
       ORDER BY po.status DESC, po.updated_at DESC LIMIT 1
  ) AS last ON true
 WHERE card.status = 'Delisted' AND card.updated_at < %(cutoff)s;

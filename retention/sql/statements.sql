-- Every statement the retention job sends, as it reaches the server: the code reads them from here
-- (retention.statements), so a review reads each one whole and sees any change as a diff. `-- name:` starts a
-- statement and names its database span; a comment at the start of a line is for the reader and is not sent. Named
-- parameters: %(name)s. Why each is shaped so: docs/how-it-works.md, "The batches" and "The backlog counts".

-- name: set bounds
-- The server's bounds on the job's session (retention.session), set once, by its first statement after the pooler
-- probe: they hold whatever the client or the network does. No COMMIT of the job waits for a standby.
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       set_config('idle_session_timeout', %(idle_session_timeout)s, false),
       set_config('idle_in_transaction_session_timeout', %(idle_in_transaction_session_timeout)s, false),
       set_config('client_connection_check_interval', %(client_connection_check_interval)s, false),
       set_config('tcp_keepalives_idle', %(tcp_keepalives_idle)s, false),
       set_config('tcp_keepalives_interval', %(tcp_keepalives_interval)s, false),
       set_config('tcp_keepalives_count', %(tcp_keepalives_count)s, false),
       set_config('tcp_user_timeout', %(tcp_user_timeout)s, false),
       set_config('synchronous_commit', %(synchronous_commit)s, false),
       set_config('application_name', %(application_name)s, false);

-- name: reset bounds
-- On a connection that outlives the run (a shell, a test): the settings back to the role's and the server's.
SELECT set_config(name, reset_val, false) FROM pg_settings WHERE name = ANY(%(names)s);

-- name: pooler probe
-- The server session's pid, through a pooler too: one that differs from the start-up message's (BackendKeyData)
-- means a pooler stands between (docs/poolers.md).
SELECT pg_backend_pid();

-- name: advisory lock
-- Marks the session with the run id: each batch returns the marker and its session's pid, proving it ran on the
-- session that holds the lock.
SELECT pg_backend_pid(), set_config(%(marker_name)s, %(marker)s, false), pg_try_advisory_lock(%(key)s);

-- name: advisory unlock
SELECT pg_advisory_unlock(%(key)s);

-- name: cutoff
-- The cutoff on the database clock; %(now)s replaces that clock in tests only.
SELECT coalesce(%(now)s, now()) - %(retention)s;

-- name: orphan_property_object_overrides: scan
-- Overrides whose card is gone (written outside catalog.operations' protocol), written within the orphan sweep
-- window: scanned in chunks of %(chunk)s from the window on, each card probed by key, outside any row-locking
-- transaction. Returns the rows scanned, the candidates' ids and the last row's key, where the next chunk resumes.
WITH chunk AS (
    SELECT id, created_at, property_object_id AS card_id FROM catalog.property_object_display_overrides
     WHERE (created_at, id)
           > (greatest(%(after_at)s::timestamptz, now() - %(orphan_sweep_window)s), %(after_id)s::bigint)
     ORDER BY created_at, id
     LIMIT %(chunk)s
), last AS (
    SELECT created_at, id FROM chunk ORDER BY created_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM chunk),
       (SELECT array_agg(id ORDER BY created_at, id)::text FROM chunk
              LEFT JOIN LATERAL (SELECT true AS found FROM catalog.property_object_cards AS card
                                  WHERE card.id = chunk.card_id LIMIT 1) AS card ON true
             WHERE card.found IS NULL),
       (SELECT created_at FROM last), (SELECT id FROM last);

-- name: orphan_property_object_overrides: batch
-- A batch of the candidates: locked, the card checked gone again under the lock, deleted. Every batch statement
-- returns the rows selected, the cards and overrides deleted, the session's pid and marker (the lock's proof), and its
-- last row's key. The DELETE finds its rows by row address (ctid), which cannot change while their row locks are
-- held; a ctid is unique within one table only, so on a partitioned table the pair (tableoid, ctid) is checked, and on
-- a plain one the TID scan pays nothing more (docs/how-it-works.md, "A partitioned catalog").
WITH batch AS (
    SELECT id, tableoid, ctid, created_at FROM catalog.property_object_display_overrides AS override
     WHERE id = ANY(%(only_ids)s::bigint[])
       AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card WHERE card.id = override.property_object_id)
       AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
       AND id::text <> ALL(%(skipped_ids)s::text[])
     ORDER BY created_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
),
deleted_overrides AS (
    DELETE FROM catalog.property_object_display_overrides AS override
     WHERE override.ctid = ANY(ARRAY(SELECT ctid FROM batch))
       AND (NOT (SELECT relhassubclass FROM pg_class
                  WHERE oid = 'catalog.property_object_display_overrides'::regclass)
            OR (override.tableoid, override.ctid) IN (SELECT tableoid, ctid FROM batch))
       AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card
                        WHERE card.id = override.property_object_id)
    RETURNING 1
),
last AS (
    SELECT created_at, id FROM batch ORDER BY created_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch), 0, (SELECT count(*) FROM deleted_overrides),
       pg_backend_pid(), current_setting('purge_delisted.run_id', true),
       (SELECT created_at FROM last), (SELECT id FROM last);

-- name: orphan_property_object_overrides: lock
-- The culprit search: a batch refused for a data reason is locked again (it rolled back whole) and its ids returned;
-- the batch statement then runs again on parts of them (its %(only_ids)s) to isolate the rows that fail. Its SELECT
-- is the batch's, word for word (tests/retention/test_statements.py).
SELECT array_agg(id)::text, pg_backend_pid(), current_setting('purge_delisted.run_id', true)
  FROM (
    SELECT id, tableoid, ctid, created_at FROM catalog.property_object_display_overrides AS override
     WHERE id = ANY(%(only_ids)s::bigint[])
       AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card WHERE card.id = override.property_object_id)
       AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
       AND id::text <> ALL(%(skipped_ids)s::text[])
     ORDER BY created_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
  ) AS batch;

-- name: orphan_building_overrides: scan
WITH chunk AS (
    SELECT id, created_at, project_id AS card_id FROM catalog.building_display_overrides
     WHERE (created_at, id)
           > (greatest(%(after_at)s::timestamptz, now() - %(orphan_sweep_window)s), %(after_id)s::bigint)
     ORDER BY created_at, id
     LIMIT %(chunk)s
), last AS (
    SELECT created_at, id FROM chunk ORDER BY created_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM chunk),
       (SELECT array_agg(id ORDER BY created_at, id)::text FROM chunk
              LEFT JOIN LATERAL (SELECT true AS found FROM catalog.project_cards AS card
                                  WHERE card.id = chunk.card_id LIMIT 1) AS card ON true
             WHERE card.found IS NULL),
       (SELECT created_at FROM last), (SELECT id FROM last);

-- name: orphan_building_overrides: batch
WITH batch AS (
    SELECT id, tableoid, ctid, created_at FROM catalog.building_display_overrides AS override
     WHERE id = ANY(%(only_ids)s::bigint[])
       AND NOT EXISTS (SELECT FROM catalog.project_cards AS card WHERE card.id = override.project_id)
       AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
       AND id::text <> ALL(%(skipped_ids)s::text[])
     ORDER BY created_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
),
deleted_overrides AS (
    DELETE FROM catalog.building_display_overrides AS override
     WHERE override.ctid = ANY(ARRAY(SELECT ctid FROM batch))
       AND (NOT (SELECT relhassubclass FROM pg_class
                  WHERE oid = 'catalog.building_display_overrides'::regclass)
            OR (override.tableoid, override.ctid) IN (SELECT tableoid, ctid FROM batch))
       AND NOT EXISTS (SELECT FROM catalog.project_cards AS card
                        WHERE card.id = override.project_id)
    RETURNING 1
),
last AS (
    SELECT created_at, id FROM batch ORDER BY created_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch), 0, (SELECT count(*) FROM deleted_overrides),
       pg_backend_pid(), current_setting('purge_delisted.run_id', true),
       (SELECT created_at FROM last), (SELECT id FROM last);

-- name: orphan_building_overrides: lock
SELECT array_agg(id)::text, pg_backend_pid(), current_setting('purge_delisted.run_id', true)
  FROM (
    SELECT id, tableoid, ctid, created_at FROM catalog.building_display_overrides AS override
     WHERE id = ANY(%(only_ids)s::bigint[])
       AND NOT EXISTS (SELECT FROM catalog.project_cards AS card WHERE card.id = override.project_id)
       AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
       AND id::text <> ALL(%(skipped_ids)s::text[])
     ORDER BY created_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
  ) AS batch;

-- name: property_objects: batch
-- The property-object cards: the oldest overdue first, those locked elsewhere skipped, the predicate repeated in
-- the DELETE as a guard, their display overrides deleted with them. The key it resumes after is a sub-select, a
-- value the planner does not estimate with: as a constant in updated_at's first histogram bucket, each batch's
-- planning read the column's actual minimum off an index, through the entries of the cards the batches before had
-- deleted (0.5 ms a batch at 10M cards, docs/benchmark-findings.md). The index scan starts at the key all the same.
WITH batch AS (
    SELECT id, tableoid, ctid, updated_at FROM catalog.property_object_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s
       AND (updated_at, id) > (SELECT %(after_at)s::timestamptz, %(after_id)s::uuid)
       AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
       AND id <> ALL(%(skipped_ids)s::uuid[])
     ORDER BY updated_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
),
deleted_cards AS (
    DELETE FROM catalog.property_object_cards AS card
     WHERE card.ctid = ANY(ARRAY(SELECT ctid FROM batch))
       AND (NOT (SELECT relhassubclass FROM pg_class WHERE oid = 'catalog.property_object_cards'::regclass)
            OR (card.tableoid, card.ctid) IN (SELECT tableoid, ctid FROM batch))
       AND card.status = 'Delisted' AND card.updated_at < %(cutoff)s
    RETURNING card.id
), deleted_overrides AS (
    DELETE FROM catalog.property_object_display_overrides
     WHERE property_object_id = ANY(ARRAY(SELECT id FROM deleted_cards))
    RETURNING 1
),
last AS (
    SELECT updated_at, id FROM batch ORDER BY updated_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM deleted_cards), (SELECT count(*) FROM deleted_overrides),
       pg_backend_pid(), current_setting('purge_delisted.run_id', true),
       (SELECT updated_at FROM last), (SELECT id FROM last);

-- name: property_objects: lock
SELECT array_agg(id)::text, pg_backend_pid(), current_setting('purge_delisted.run_id', true)
  FROM (
    SELECT id, tableoid, ctid, updated_at FROM catalog.property_object_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s
       AND (updated_at, id) > (SELECT %(after_at)s::timestamptz, %(after_id)s::uuid)
       AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
       AND id <> ALL(%(skipped_ids)s::uuid[])
     ORDER BY updated_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
  ) AS batch;

-- name: projects: scan
-- A project goes only once no property-object card is left under it. The candidates, scanned in chunks: overdue
-- projects with no property-object card. The key a chunk or a batch resumes after is a sub-select, as in
-- property_objects: batch.
WITH chunk AS (
    SELECT updated_at, id FROM catalog.project_cards
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s
       AND (updated_at, id) > (SELECT %(after_at)s::timestamptz, %(after_id)s::uuid)
     ORDER BY updated_at, id
     LIMIT %(chunk)s
), last AS (
    SELECT updated_at, id FROM chunk ORDER BY updated_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM chunk),
       (SELECT array_agg(id ORDER BY updated_at, id)::text FROM chunk AS card
         WHERE NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id)),
       (SELECT updated_at FROM last), (SELECT id FROM last);

-- name: projects: batch
-- Re-checked after the lock with a fresh snapshot (catalog.projects_with_property_objects): an object upsert holds
-- its project FOR KEY SHARE, so a project that gained an object meanwhile is kept.
WITH batch AS (
    SELECT id, tableoid, ctid, updated_at FROM catalog.project_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s
       AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id)
       AND (updated_at, id) > (SELECT %(after_at)s::timestamptz, %(after_id)s::uuid)
       AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
       AND id <> ALL(%(skipped_ids)s::uuid[])
     ORDER BY updated_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
),
holding AS (
    SELECT catalog.projects_with_property_objects(ARRAY(SELECT id FROM batch)) AS ids
),
deleted_cards AS (
    DELETE FROM catalog.project_cards AS card
     WHERE card.ctid = ANY(ARRAY(SELECT ctid FROM batch))
       AND (NOT (SELECT relhassubclass FROM pg_class WHERE oid = 'catalog.project_cards'::regclass)
            OR (card.tableoid, card.ctid) IN (SELECT tableoid, ctid FROM batch))
       AND card.status = 'Delisted' AND card.updated_at < %(cutoff)s
       AND card.id <> ALL((SELECT ids FROM holding)::uuid[])
    RETURNING card.id
), deleted_overrides AS (
    DELETE FROM catalog.building_display_overrides
     WHERE project_id = ANY(ARRAY(SELECT id FROM deleted_cards))
    RETURNING 1
),
last AS (
    SELECT updated_at, id FROM batch ORDER BY updated_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch), (SELECT count(*) FROM deleted_cards), (SELECT count(*) FROM deleted_overrides),
       pg_backend_pid(), current_setting('purge_delisted.run_id', true),
       (SELECT updated_at FROM last), (SELECT id FROM last);

-- name: projects: lock
SELECT array_agg(id)::text, pg_backend_pid(), current_setting('purge_delisted.run_id', true)
  FROM (
    SELECT id, tableoid, ctid, updated_at FROM catalog.project_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s
       AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id)
       AND (updated_at, id) > (SELECT %(after_at)s::timestamptz, %(after_id)s::uuid)
       AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
       AND id <> ALL(%(skipped_ids)s::uuid[])
     ORDER BY updated_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
  ) AS batch;

-- name: backlog: property_object_cards, in chunks
-- A run's count, one chunk: the Delisted entries after %(after)s up to %(until)s (only the overdue ones when
-- %(count_within_window)s is false), the overdue among them, the first and last moment. A chunk is the first %(chunk)s
-- entries and every card sharing the last one's moment: a cascade's cards never straddle two chunks. The chunk reads
-- the moment alone (the id beside it cost 4 % of a start count of 2.5M entries).
SELECT count(*), count(*) FILTER (WHERE updated_at < %(cutoff)s), min(updated_at), max(updated_at)
  FROM (SELECT updated_at FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND (%(count_within_window)s OR updated_at < %(cutoff)s)
           AND updated_at > %(after)s AND updated_at <= %(until)s
         ORDER BY updated_at
         FETCH FIRST %(chunk)s ROWS WITH TIES) AS card;

-- name: backlog: property_object_cards, whole
-- The admin page's and the web metrics' count, one statement: a bare count(*) on each side of the cutoff and the
-- two ends of every Delisted entry read off the index (the oldest even when none is overdue), rather than a FILTER,
-- min and max evaluated on every entry, which took half as long again (docs/benchmark-findings.md, "The admin page
-- at 1M cards, again").
SELECT overdue.entries + within_window.entries, overdue.entries, ends.first, ends.last
  FROM (SELECT count(*) AS entries FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s
           AND updated_at > %(after)s AND updated_at <= %(until)s) AS overdue,
       (SELECT count(*) AS entries FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND %(count_within_window)s AND updated_at >= %(cutoff)s
           AND updated_at > %(after)s AND updated_at <= %(until)s) AS within_window,
       (SELECT min(updated_at) AS first, max(updated_at) AS last FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND updated_at > %(after)s AND updated_at <= %(until)s) AS ends;

-- name: backlog: project_cards, in chunks
SELECT count(*), count(*) FILTER (WHERE updated_at < %(cutoff)s), min(updated_at), max(updated_at)
  FROM (SELECT updated_at FROM catalog.project_cards
         WHERE status = 'Delisted' AND (%(count_within_window)s OR updated_at < %(cutoff)s)
           AND updated_at > %(after)s AND updated_at <= %(until)s
         ORDER BY updated_at
         FETCH FIRST %(chunk)s ROWS WITH TIES) AS card;

-- name: backlog: project_cards, whole
SELECT overdue.entries + within_window.entries, overdue.entries, ends.first, ends.last
  FROM (SELECT count(*) AS entries FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s
           AND updated_at > %(after)s AND updated_at <= %(until)s) AS overdue,
       (SELECT count(*) AS entries FROM catalog.project_cards
         WHERE status = 'Delisted' AND %(count_within_window)s AND updated_at >= %(cutoff)s
           AND updated_at > %(after)s AND updated_at <= %(until)s) AS within_window,
       (SELECT min(updated_at) AS first, max(updated_at) AS last FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at > %(after)s AND updated_at <= %(until)s) AS ends;

-- name: backlog: held back, in chunks
-- The overdue projects and those held back by a remaining property-object card (any: a deleted one is gone).
SELECT count(*),
       count(*) FILTER (WHERE EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id)),
       min(updated_at), max(updated_at)
  FROM (SELECT id, updated_at FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND updated_at > %(after)s
           AND updated_at <= %(until)s
         ORDER BY updated_at
         FETCH FIRST %(chunk)s ROWS WITH TIES) AS card;

-- name: backlog: held back, whole
SELECT count(*),
       count(*) FILTER (WHERE EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id)),
       min(updated_at), max(updated_at)
  FROM (SELECT id, updated_at FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND updated_at > %(after)s
           AND updated_at <= %(until)s) AS card;

-- name: first object kept
-- The dry run (retention.preview): where a run reaching the %(objects)s oldest overdue property objects stops, the
-- first overdue object it leaves; none: it takes them all.
SELECT updated_at, id::text FROM catalog.property_object_cards
 WHERE status = 'Delisted' AND updated_at < %(cutoff)s
 ORDER BY updated_at, id
 OFFSET %(objects)s LIMIT 1;

-- name: held back after
-- The overdue projects still held back once the objects taken are gone: those with an object in one of the ranges
-- of the index (project_id, status, updated_at) a run leaves, the complement of the objects taken, probed range by
-- range (NOT (taken) walked every taken one).
SELECT count(*) FROM catalog.project_cards AS card
 WHERE status = 'Delisted' AND updated_at < %(cutoff)s
   AND (EXISTS (SELECT FROM catalog.property_object_cards AS po
                 WHERE po.project_id = card.id AND po.status < 'Delisted')
        OR EXISTS (SELECT FROM catalog.property_object_cards AS po
                    WHERE po.project_id = card.id AND po.status > 'Delisted')
        OR EXISTS (SELECT FROM catalog.property_object_cards AS po
                    WHERE po.project_id = card.id AND po.status = 'Delisted' AND po.updated_at >= %(cutoff)s)
        OR EXISTS (SELECT FROM catalog.property_object_cards AS po
                    WHERE po.project_id = card.id AND po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                      AND (po.updated_at, po.id) >= (%(kept_from_at)s, %(kept_from_id)s::uuid)));

-- name: overrides of taken
-- The overrides of exactly the rows the real batches would take, in the same order.
WITH taken_objects AS (
    SELECT id FROM catalog.property_object_cards AS po
     WHERE po.status = 'Delisted' AND po.updated_at < %(cutoff)s
       AND (%(kept_from_at)s::timestamptz IS NULL
            OR (po.updated_at, po.id) < (%(kept_from_at)s, %(kept_from_id)s::uuid))
), taken_projects AS (
    SELECT id FROM catalog.project_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s
       AND NOT (EXISTS (SELECT FROM catalog.property_object_cards AS po
                     WHERE po.project_id = card.id AND po.status < 'Delisted')
            OR EXISTS (SELECT FROM catalog.property_object_cards AS po
                        WHERE po.project_id = card.id AND po.status > 'Delisted')
            OR EXISTS (SELECT FROM catalog.property_object_cards AS po
                        WHERE po.project_id = card.id AND po.status = 'Delisted' AND po.updated_at >= %(cutoff)s)
            OR EXISTS (SELECT FROM catalog.property_object_cards AS po
                        WHERE po.project_id = card.id AND po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                          AND (po.updated_at, po.id) >= (%(kept_from_at)s, %(kept_from_id)s::uuid)))
     ORDER BY updated_at, id LIMIT %(projects)s
)
SELECT (SELECT count(*) FROM catalog.property_object_display_overrides
         WHERE property_object_id IN (SELECT id FROM taken_objects)),
       (SELECT count(*) FROM catalog.building_display_overrides WHERE project_id IN (SELECT id FROM taken_projects));

-- name: foreign partition
-- The layout a run refuses: a foreign table among the partitions (or inheritance children, at any depth) of a
-- table the job deletes from; postgres_fdw sends FOR UPDATE without SKIP LOCKED (docs/how-it-works.md).
WITH RECURSIVE tree AS (
    SELECT oid AS root, oid AS relid FROM pg_class
     WHERE oid IN ('catalog.property_object_cards'::regclass, 'catalog.project_cards'::regclass,
                   'catalog.property_object_display_overrides'::regclass,
                   'catalog.building_display_overrides'::regclass)
    UNION ALL
    SELECT tree.root, pg_inherits.inhrelid FROM tree JOIN pg_inherits ON pg_inherits.inhparent = tree.relid
)
SELECT tree.root::regclass::text, tree.relid::regclass::text
  FROM tree JOIN pg_class ON pg_class.oid = tree.relid
 WHERE pg_class.relkind = 'f'
 ORDER BY 1, 2
 LIMIT 1;

-- name: replica lag
-- How far behind the slowest streaming standby is, as the primary sees it (retention.pacing); pg_basebackup's WAL
-- senders (state 'backup') copy files, they are not standbys.
SELECT count(*),
       bool_or(state IS NULL),
       max(CASE
           WHEN replay_lsn >= pg_current_wal_lsn() THEN interval '0'
           WHEN replay_lsn < flush_lsn THEN coalesce(replay_lag, interval '0')
               + greatest(clock_timestamp() - reply_time, interval '0')
           ELSE coalesce(replay_lag, interval '0')
       END)
  FROM pg_stat_replication
 WHERE state IS DISTINCT FROM 'backup';

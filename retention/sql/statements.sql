-- session: its bounds
SELECT set_config('statement_timeout', %(statement_timeout)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       set_config('idle_session_timeout', %(idle_session_timeout)s, false),
       set_config('idle_in_transaction_session_timeout', %(idle_in_transaction_session_timeout)s, false),
       set_config('client_connection_check_interval', %(client_connection_check_interval)s, false),
       set_config('tcp_keepalives_idle', %(tcp_keepalives_idle)s, false),
       set_config('tcp_keepalives_interval', %(tcp_keepalives_interval)s, false),
       set_config('tcp_keepalives_count', %(tcp_keepalives_count)s, false),
       set_config('tcp_user_timeout', %(tcp_user_timeout)s, false),
       set_config('application_name', %(application_name)s, false);

-- session: its bounds reset
SELECT set_config(name, reset_val, false) FROM pg_settings WHERE name = ANY(%(names)s);

-- pooler probe
SELECT pg_backend_pid();

-- advisory lock
SELECT pg_backend_pid(), set_config(%(marker_name)s, %(marker)s, false), pg_try_advisory_lock(%(key)s);

-- advisory unlock
SELECT pg_advisory_unlock(%(key)s);

-- cutoff
SELECT coalesce(%(now)s, now()) - %(retention)s;

-- orphan_property_object_overrides.scan_sql
WITH chunk AS (
    SELECT id, created_at, property_object_id AS card_id FROM catalog.property_object_display_overrides
     WHERE (created_at, id) > (greatest(%(after_at)s::timestamptz, now() - %(orphan_sweep_window)s), %(after_id)s::bigint)
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

-- orphan_property_object_overrides.batch_sql
WITH batch AS (
    SELECT id, tableoid, ctid, created_at FROM catalog.property_object_display_overrides AS override
     WHERE id = ANY(%(only_ids)s::bigint[]) AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card WHERE card.id = override.property_object_id) AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
       AND id::text <> ALL(%(skipped_ids)s::text[])
     ORDER BY created_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
),
deleted_overrides AS (
    DELETE FROM catalog.property_object_display_overrides AS override
     WHERE override.ctid = ANY(ARRAY(SELECT ctid FROM batch))
       AND (NOT (SELECT relhassubclass FROM pg_class WHERE oid = 'catalog.property_object_display_overrides'::regclass)
            OR (override.tableoid, override.ctid) IN (SELECT tableoid, ctid FROM batch))
       AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card WHERE card.id = override.property_object_id)
    RETURNING 1
),
last AS (
    SELECT created_at, id FROM batch ORDER BY created_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch), 0, (SELECT count(*) FROM deleted_overrides),
       pg_backend_pid(), current_setting('purge_delisted.run_id', true),
       (SELECT created_at FROM last), (SELECT id FROM last);

-- orphan_property_object_overrides.lock_sql
SELECT count(*), array_agg(id)::text, array_agg(tableoid)::text, array_agg(ctid)::text,
       pg_backend_pid(), current_setting('purge_delisted.run_id', true)
  FROM (
    SELECT id, tableoid, ctid, created_at FROM catalog.property_object_display_overrides AS override
     WHERE id = ANY(%(only_ids)s::bigint[]) AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card WHERE card.id = override.property_object_id) AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
       AND id::text <> ALL(%(skipped_ids)s::text[])
     ORDER BY created_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
  ) AS batch;

-- orphan_property_object_overrides.delete_sql
WITH batch AS (
    SELECT unnest(%(tables)s::oid[]) AS tableoid, unnest(%(row_addresses)s::tid[]) AS ctid,
           unnest(%(ids)s::bigint[]) AS id
),
deleted_overrides AS (
    DELETE FROM catalog.property_object_display_overrides AS override
     WHERE override.ctid = ANY(ARRAY(SELECT ctid FROM batch))
       AND (NOT (SELECT relhassubclass FROM pg_class WHERE oid = 'catalog.property_object_display_overrides'::regclass)
            OR (override.tableoid, override.ctid) IN (SELECT tableoid, ctid FROM batch))
       AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS card WHERE card.id = override.property_object_id)
    RETURNING 1
)
SELECT 0, (SELECT count(*) FROM deleted_overrides);

-- orphan_building_overrides.scan_sql
WITH chunk AS (
    SELECT id, created_at, project_id AS card_id FROM catalog.building_display_overrides
     WHERE (created_at, id) > (greatest(%(after_at)s::timestamptz, now() - %(orphan_sweep_window)s), %(after_id)s::bigint)
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

-- orphan_building_overrides.batch_sql
WITH batch AS (
    SELECT id, tableoid, ctid, created_at FROM catalog.building_display_overrides AS override
     WHERE id = ANY(%(only_ids)s::bigint[]) AND NOT EXISTS (SELECT FROM catalog.project_cards AS card WHERE card.id = override.project_id) AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
       AND id::text <> ALL(%(skipped_ids)s::text[])
     ORDER BY created_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
),
deleted_overrides AS (
    DELETE FROM catalog.building_display_overrides AS override
     WHERE override.ctid = ANY(ARRAY(SELECT ctid FROM batch))
       AND (NOT (SELECT relhassubclass FROM pg_class WHERE oid = 'catalog.building_display_overrides'::regclass)
            OR (override.tableoid, override.ctid) IN (SELECT tableoid, ctid FROM batch))
       AND NOT EXISTS (SELECT FROM catalog.project_cards AS card WHERE card.id = override.project_id)
    RETURNING 1
),
last AS (
    SELECT created_at, id FROM batch ORDER BY created_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM batch), 0, (SELECT count(*) FROM deleted_overrides),
       pg_backend_pid(), current_setting('purge_delisted.run_id', true),
       (SELECT created_at FROM last), (SELECT id FROM last);

-- orphan_building_overrides.lock_sql
SELECT count(*), array_agg(id)::text, array_agg(tableoid)::text, array_agg(ctid)::text,
       pg_backend_pid(), current_setting('purge_delisted.run_id', true)
  FROM (
    SELECT id, tableoid, ctid, created_at FROM catalog.building_display_overrides AS override
     WHERE id = ANY(%(only_ids)s::bigint[]) AND NOT EXISTS (SELECT FROM catalog.project_cards AS card WHERE card.id = override.project_id) AND (created_at, id) > (%(after_at)s::timestamptz, %(after_id)s::bigint)
       AND id::text <> ALL(%(skipped_ids)s::text[])
     ORDER BY created_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
  ) AS batch;

-- orphan_building_overrides.delete_sql
WITH batch AS (
    SELECT unnest(%(tables)s::oid[]) AS tableoid, unnest(%(row_addresses)s::tid[]) AS ctid,
           unnest(%(ids)s::bigint[]) AS id
),
deleted_overrides AS (
    DELETE FROM catalog.building_display_overrides AS override
     WHERE override.ctid = ANY(ARRAY(SELECT ctid FROM batch))
       AND (NOT (SELECT relhassubclass FROM pg_class WHERE oid = 'catalog.building_display_overrides'::regclass)
            OR (override.tableoid, override.ctid) IN (SELECT tableoid, ctid FROM batch))
       AND NOT EXISTS (SELECT FROM catalog.project_cards AS card WHERE card.id = override.project_id)
    RETURNING 1
)
SELECT 0, (SELECT count(*) FROM deleted_overrides);

-- property_objects.batch_sql
WITH batch AS (
    SELECT id, tableoid, ctid, updated_at FROM catalog.property_object_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s
       AND (updated_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
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

-- property_objects.lock_sql
SELECT count(*), array_agg(id)::text, array_agg(tableoid)::text, array_agg(ctid)::text,
       pg_backend_pid(), current_setting('purge_delisted.run_id', true)
  FROM (
    SELECT id, tableoid, ctid, updated_at FROM catalog.property_object_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s
       AND (updated_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
       AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
       AND id <> ALL(%(skipped_ids)s::uuid[])
     ORDER BY updated_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
  ) AS batch;

-- property_objects.delete_sql
WITH batch AS (
    SELECT unnest(%(tables)s::oid[]) AS tableoid, unnest(%(row_addresses)s::tid[]) AS ctid,
           unnest(%(ids)s::uuid[]) AS id
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
)
SELECT (SELECT count(*) FROM deleted_cards), (SELECT count(*) FROM deleted_overrides);

-- projects.scan_sql
WITH chunk AS (
    SELECT updated_at, id FROM catalog.project_cards
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND (updated_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
     ORDER BY updated_at, id
     LIMIT %(chunk)s
), last AS (
    SELECT updated_at, id FROM chunk ORDER BY updated_at DESC, id DESC LIMIT 1
)
SELECT (SELECT count(*) FROM chunk),
       (SELECT array_agg(id ORDER BY updated_at, id)::text FROM chunk AS card WHERE NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND true)),
       (SELECT updated_at FROM last), (SELECT id FROM last);

-- projects.batch_sql
WITH batch AS (
    SELECT id, tableoid, ctid, updated_at FROM catalog.project_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND true)
       AND (updated_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
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

-- projects.lock_sql
SELECT count(*), array_agg(id)::text, array_agg(tableoid)::text, array_agg(ctid)::text,
       pg_backend_pid(), current_setting('purge_delisted.run_id', true)
  FROM (
    SELECT id, tableoid, ctid, updated_at FROM catalog.project_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND NOT EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND true)
       AND (updated_at, id) > (%(after_at)s::timestamptz, %(after_id)s::uuid)
       AND (%(only_ids)s::uuid[] IS NULL OR id = ANY(%(only_ids)s::uuid[]))
       AND id <> ALL(%(skipped_ids)s::uuid[])
     ORDER BY updated_at, id
     LIMIT %(batch_size)s
       FOR UPDATE SKIP LOCKED
  ) AS batch;

-- projects.delete_sql
WITH batch AS (
    SELECT unnest(%(tables)s::oid[]) AS tableoid, unnest(%(row_addresses)s::tid[]) AS ctid,
           unnest(%(ids)s::uuid[]) AS id
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
)
SELECT (SELECT count(*) FROM deleted_cards), (SELECT count(*) FROM deleted_overrides);

-- backlog: property_object_cards, in chunks
SELECT count(*), count(*) FILTER (WHERE updated_at < %(cutoff)s), min(updated_at), max(updated_at)
  FROM (SELECT id, updated_at FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND (%(count_within_window)s OR updated_at < %(cutoff)s) AND updated_at > %(after)s AND updated_at <= %(until)s
         ORDER BY updated_at
         FETCH FIRST %(chunk)s ROWS WITH TIES) AS card;

-- backlog: property_object_cards, whole
SELECT overdue.entries + within_window.entries, overdue.entries, ends.first, ends.last
  FROM (SELECT count(*) AS entries FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s
           AND updated_at > %(after)s AND updated_at <= %(until)s) AS overdue,
       (SELECT count(*) AS entries FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND %(count_within_window)s AND updated_at >= %(cutoff)s
           AND updated_at > %(after)s AND updated_at <= %(until)s) AS within_window,
       (SELECT min(updated_at) AS first, max(updated_at) AS last FROM catalog.property_object_cards
         WHERE status = 'Delisted' AND updated_at > %(after)s AND updated_at <= %(until)s) AS ends;

-- backlog: project_cards, in chunks
SELECT count(*), count(*) FILTER (WHERE updated_at < %(cutoff)s), min(updated_at), max(updated_at)
  FROM (SELECT id, updated_at FROM catalog.project_cards
         WHERE status = 'Delisted' AND (%(count_within_window)s OR updated_at < %(cutoff)s) AND updated_at > %(after)s AND updated_at <= %(until)s
         ORDER BY updated_at
         FETCH FIRST %(chunk)s ROWS WITH TIES) AS card;

-- backlog: project_cards, whole
SELECT overdue.entries + within_window.entries, overdue.entries, ends.first, ends.last
  FROM (SELECT count(*) AS entries FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s
           AND updated_at > %(after)s AND updated_at <= %(until)s) AS overdue,
       (SELECT count(*) AS entries FROM catalog.project_cards
         WHERE status = 'Delisted' AND %(count_within_window)s AND updated_at >= %(cutoff)s
           AND updated_at > %(after)s AND updated_at <= %(until)s) AS within_window,
       (SELECT min(updated_at) AS first, max(updated_at) AS last FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at > %(after)s AND updated_at <= %(until)s) AS ends;

-- backlog: held back, in chunks
SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND true)), min(updated_at), max(updated_at)
  FROM (SELECT id, updated_at FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND updated_at > %(after)s AND updated_at <= %(until)s
         ORDER BY updated_at
         FETCH FIRST %(chunk)s ROWS WITH TIES) AS card;

-- backlog: held back, whole
SELECT count(*), count(*) FILTER (WHERE EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND true)), min(updated_at), max(updated_at)
  FROM (SELECT id, updated_at FROM catalog.project_cards
         WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND updated_at > %(after)s AND updated_at <= %(until)s) AS card;

-- dry run: first object kept
SELECT updated_at, id::text FROM catalog.property_object_cards
 WHERE status = 'Delisted' AND updated_at < %(cutoff)s
 ORDER BY updated_at, id
 OFFSET %(objects)s LIMIT 1;

-- dry run: held back after
SELECT count(*) FROM catalog.project_cards AS card
 WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND (EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND po.status < 'Delisted')
     OR EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND po.status > 'Delisted')
     OR EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND po.status = 'Delisted' AND po.updated_at >= %(cutoff)s)
     OR EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                 AND (po.updated_at, po.id) >= (%(kept_from_at)s, %(kept_from_id)s::uuid)));

-- dry run: overrides of taken
WITH taken_objects AS (
    SELECT id FROM catalog.property_object_cards AS po WHERE po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                 AND (%(kept_from_at)s::timestamptz IS NULL
                      OR (po.updated_at, po.id) < (%(kept_from_at)s, %(kept_from_id)s::uuid))
), taken_projects AS (
    SELECT id FROM catalog.project_cards AS card
     WHERE status = 'Delisted' AND updated_at < %(cutoff)s AND NOT (EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND po.status < 'Delisted')
     OR EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND po.status > 'Delisted')
     OR EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND po.status = 'Delisted' AND po.updated_at >= %(cutoff)s)
     OR EXISTS (SELECT FROM catalog.property_object_cards AS po WHERE po.project_id = card.id AND po.status = 'Delisted' AND po.updated_at < %(cutoff)s
                 AND (po.updated_at, po.id) >= (%(kept_from_at)s, %(kept_from_id)s::uuid)))
     ORDER BY updated_at, id LIMIT %(projects)s
)
SELECT (SELECT count(*) FROM catalog.property_object_display_overrides
         WHERE property_object_id IN (SELECT id FROM taken_objects)),
       (SELECT count(*) FROM catalog.building_display_overrides WHERE project_id IN (SELECT id FROM taken_projects));

-- admin page: held back now and after
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

-- culprit search: a refused batch's rows
SELECT unnest(%(ids)s::text[]), unnest(%(tables)s::oid[])::text, unnest(%(row_addresses)s::tid[])::text;

-- layout refused: a foreign partition
WITH RECURSIVE tree AS (
    SELECT oid AS root, oid AS relid FROM pg_class
     WHERE oid IN ('catalog.property_object_cards'::regclass, 'catalog.project_cards'::regclass,
                   'catalog.property_object_display_overrides'::regclass, 'catalog.building_display_overrides'::regclass)
    UNION ALL
    SELECT tree.root, pg_inherits.inhrelid FROM tree JOIN pg_inherits ON pg_inherits.inhparent = tree.relid
)
SELECT tree.root::regclass::text, tree.relid::regclass::text
  FROM tree JOIN pg_class ON pg_class.oid = tree.relid
 WHERE pg_class.relkind = 'f'
 ORDER BY 1, 2
 LIMIT 1;

-- replica lag
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

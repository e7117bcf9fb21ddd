-- catalog_retention: the database role the nightly `manage.py purge_delisted` job logs in as.
--
-- It may find, lock and delete Delisted cards and their display overrides in schema `catalog`, and read server
-- statistics for the standbys' lag (last grant), and nothing else: no access to catalog.ranking_rules, none to any
-- other schema (Django's own tables included), no DDL, no INSERT, and no UPDATE beyond the one column PostgreSQL
-- insists on (below). The job needs nothing else at start-up: its system checks do not query the database and it
-- reads no migration state.
--
-- Run it as a superuser (or the owner of schema catalog) in the catalog database; re-running it is harmless:
--     psql -d catalog -v ON_ERROR_STOP=1 -f deploy/sql/catalog_retention_role.sql
-- then give the role a password out of band (`\password catalog_retention`) and point the job at it:
--     DATABASE_URL=postgres://catalog_retention:…@db-host:5432/catalog
-- A role belongs to the whole cluster, grants to one database: run it once in every catalog database.
-- Not covered here: PUBLIC's default TEMPORARY privilege on the database (revoke it from PUBLIC if temporary
-- tables are unwanted for every role).

DO $$
BEGIN
    CREATE ROLE catalog_retention LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    -- Already there (a re-run, or created concurrently for another database of the cluster).
    IF EXISTS (
        SELECT FROM pg_roles
         WHERE rolname = 'catalog_retention'
           AND (rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls OR NOT rolcanlogin)
    ) THEN
        RAISE EXCEPTION 'role catalog_retention exists with other attributes than LOGIN only: fix it by hand';
    END IF;
END $$;

DO $$
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO catalog_retention', current_database());
END $$;

GRANT USAGE ON SCHEMA catalog TO catalog_retention;

-- Start from nothing on the schema's tables (this also revokes column privileges), then grant exactly:
REVOKE ALL ON ALL TABLES IN SCHEMA catalog FROM catalog_retention;

-- SELECT: the batch predicate, the "no object left under this project" guard and the backlog counts read rows;
-- DELETE: the purge itself, cards and their live and soft-deleted overrides.
GRANT SELECT, DELETE ON
    catalog.project_cards,
    catalog.property_object_cards,
    catalog.property_object_display_overrides,
    catalog.building_display_overrides
TO catalog_retention;

-- The batch locks its cards with SELECT ... FOR UPDATE SKIP LOCKED, which PostgreSQL allows only with the UPDATE
-- privilege on at least one column of the table ("Privileges", section 5.7 of the manual); DELETE does not
-- suffice. created_at is the column whose change harms least: the retention clock is updated_at, which the role
-- cannot change, and neither status nor any displayed field.
-- The sweep of orphan overrides (overrides whose card is gone) locks them the same way.
GRANT UPDATE (created_at) ON
    catalog.project_cards,
    catalog.property_object_cards,
    catalog.property_object_display_overrides,
    catalog.building_display_overrides
TO catalog_retention;

-- Replica-lag pacing (retention/pacing.py) reads pg_stat_replication on the primary, whose details (state, WAL
-- positions, lag) PostgreSQL shows only to members of pg_read_all_stats: other roles see NULLs. That membership
-- suffices; pg_monitor would add settings and scan functions the job never uses. It is cluster-wide and also
-- shows the role every session's statistics and query text in pg_stat_activity, no table data.
GRANT pg_read_all_stats TO catalog_retention;

-- Defense in depth: even a wrong DELETE under this role (a bug, a hand-typed statement) deletes only Delisted cards.
-- Row-level security with a permissive policy for everyone (no change for any other role; the tables' owner
-- bypasses it anyway) and restrictive policies for this role alone: its DELETE and its FOR UPDATE locks (which
-- UPDATE policies govern) see only Delisted cards.
DO $$
DECLARE
    card_table text;
BEGIN
    FOREACH card_table IN ARRAY ARRAY['project_cards', 'property_object_cards'] LOOP
        EXECUTE format('ALTER TABLE catalog.%I ENABLE ROW LEVEL SECURITY', card_table);
        EXECUTE format('DROP POLICY IF EXISTS everyone ON catalog.%I', card_table);
        EXECUTE format('CREATE POLICY everyone ON catalog.%I USING (true) WITH CHECK (true)', card_table);
        EXECUTE format('DROP POLICY IF EXISTS retention_deletes_only_delisted ON catalog.%I', card_table);
        EXECUTE format(
            'CREATE POLICY retention_deletes_only_delisted ON catalog.%I AS RESTRICTIVE FOR DELETE '
            'TO catalog_retention USING (status = ''Delisted'')', card_table);
        EXECUTE format('DROP POLICY IF EXISTS retention_locks_only_delisted ON catalog.%I', card_table);
        EXECUTE format(
            'CREATE POLICY retention_locks_only_delisted ON catalog.%I AS RESTRICTIVE FOR UPDATE '
            'TO catalog_retention USING (status = ''Delisted'')', card_table);
    END LOOP;
END $$;

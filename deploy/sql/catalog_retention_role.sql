-- catalog_retention: the database role the nightly `manage.py purge_delisted` job logs in as.
--
-- It may find, lock and delete Delisted cards and their display overrides in schema `catalog`, and read server
-- statistics for the standbys' lag (the grants), and nothing else: no access to catalog.ranking_rules, none to any
-- other schema (Django's own tables included), no DDL, no INSERT, no UPDATE; and its DELETEs remove only what the
-- job removes (the triggers at the end). The job needs nothing else at start-up: its system checks do not query the
-- database and it reads no migration state.
--
-- Run it as a superuser (or the owner of schema catalog) in the catalog database; re-running it is harmless:
--     psql -d catalog -v ON_ERROR_STOP=1 -f deploy/sql/catalog_retention_role.sql
-- then give the role a password out of band (`\password catalog_retention`) and point the job at it
-- (docs/production.md, docs/database-role.md):
--     DELISTED_RETENTION_DATABASE_URL=postgres://catalog_retention:…@db-host:5432/catalog
-- A role belongs to the whole cluster, grants to one database: run it once in every catalog database.
-- Not covered here: PUBLIC's default TEMPORARY privilege on the database (revoke it from PUBLIC if temporary
-- tables are unwanted for every role).
--
-- Safe on a live database: it is one transaction, so the job never runs between the REVOKE and the GRANTs below,
-- and a failure changes nothing. Creating the triggers needs a lock that waits for the writes in flight on the
-- tables and holds back new ones meanwhile; lock_timeout bounds that wait, and the script gives up whole
-- ("canceling statement due to lock timeout") rather than queue the application behind a long transaction:
-- run it again at a quieter moment.

BEGIN;
SET LOCAL lock_timeout = '5s';

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
-- suffice. created_at is the column whose change would harm least, and a trigger below refuses every UPDATE of this
-- role: the grant lets it lock rows, not change them.
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

-- Defense in depth: even a wrong statement under this role (a bug, a hand-typed DELETE) removes only what the job
-- removes. Triggers, not row-level security: a table with row-level security enabled refuses pg_dump and any
-- session with row_security = off ("query would be affected by row-level security policy") unless its role owns
-- the table or has BYPASSRLS, which would break backup and ETL roles that only read. The triggers fire only when
-- the current user is catalog_retention (their WHEN clause), so no other role sees a change; the role can neither
-- drop nor disable them (that needs the tables' owner) nor switch triggers off (session_replication_role needs a
-- superuser).
--
-- A card only when the job would delete it, whatever the statement says: Delisted for longer than the shortest
-- retention the job accepts (1 day, retention/limits.py), and a project only once no property-object card is left
-- under it. Any other row is skipped, as the job's own guard skips it: the DELETE goes on without it.
CREATE OR REPLACE FUNCTION catalog.catalog_retention_deletes_only_overdue_cards() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF OLD.status <> 'Delisted' OR OLD.updated_at >= now() - interval '1 day' THEN
        RETURN NULL;
    END IF;
    IF TG_TABLE_NAME = 'project_cards'
       AND EXISTS (SELECT FROM catalog.property_object_cards WHERE project_id = OLD.id) THEN
        RETURN NULL;
    END IF;
    RETURN OLD;
END $$;

-- A display override only with its card: checked at commit, once the card is gone (deleted in the same
-- transaction, by the job's batch in the same statement, or long before: an orphan).
CREATE OR REPLACE FUNCTION catalog.catalog_retention_deletes_overrides_only_with_their_card() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    card_still_there boolean;
BEGIN
    IF TG_TABLE_NAME = 'property_object_display_overrides' THEN
        card_still_there := EXISTS (SELECT FROM catalog.property_object_cards WHERE id = OLD.property_object_id);
    ELSE
        card_still_there := EXISTS (SELECT FROM catalog.project_cards WHERE id = OLD.project_id);
    END IF;
    IF card_still_there THEN
        RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
            'catalog_retention deletes a display override only with its card: %s %s has its card still there',
            TG_TABLE_NAME, OLD.id);
    END IF;
    RETURN NULL;
END $$;

-- No change to any row: the UPDATE (created_at) grant above is there for FOR UPDATE, which fires no trigger.
CREATE OR REPLACE FUNCTION catalog.catalog_retention_changes_nothing() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'insufficient_privilege', MESSAGE = format(
        'catalog_retention may lock rows of catalog.%s but change none', TG_TABLE_NAME);
END $$;

DO $$
DECLARE
    card_table text;
    override_table text;
    catalog_table text;
BEGIN
    FOREACH card_table IN ARRAY ARRAY['project_cards', 'property_object_cards'] LOOP
        -- What the previous version of this script made (row-level security with these policies): undone.
        IF EXISTS (SELECT FROM pg_policies WHERE schemaname = 'catalog' AND tablename = card_table
                                               AND policyname = 'retention_deletes_only_delisted') THEN
            EXECUTE format('DROP POLICY retention_deletes_only_delisted ON catalog.%I', card_table);
            EXECUTE format('DROP POLICY IF EXISTS retention_locks_only_delisted ON catalog.%I', card_table);
            EXECUTE format('DROP POLICY IF EXISTS everyone ON catalog.%I', card_table);
            IF NOT EXISTS (SELECT FROM pg_policies WHERE schemaname = 'catalog' AND tablename = card_table) THEN
                EXECUTE format('ALTER TABLE catalog.%I DISABLE ROW LEVEL SECURITY', card_table);
            END IF;
        END IF;
        EXECUTE format(
            'CREATE OR REPLACE TRIGGER catalog_retention_deletes_only_overdue_cards BEFORE DELETE ON catalog.%I '
            'FOR EACH ROW WHEN (current_user = ''catalog_retention'') '
            'EXECUTE FUNCTION catalog.catalog_retention_deletes_only_overdue_cards()', card_table);
    END LOOP;
    FOREACH override_table IN ARRAY ARRAY['property_object_display_overrides', 'building_display_overrides'] LOOP
        -- A constraint trigger, so that it can wait for the commit; PostgreSQL cannot CREATE OR REPLACE one.
        IF NOT EXISTS (SELECT FROM pg_trigger
                        WHERE tgrelid = format('catalog.%I', override_table)::regclass
                          AND tgname = 'catalog_retention_deletes_overrides_only_with_their_card') THEN
            EXECUTE format(
                'CREATE CONSTRAINT TRIGGER catalog_retention_deletes_overrides_only_with_their_card '
                'AFTER DELETE ON catalog.%I DEFERRABLE INITIALLY DEFERRED '
                'FOR EACH ROW WHEN (current_user = ''catalog_retention'') '
                'EXECUTE FUNCTION catalog.catalog_retention_deletes_overrides_only_with_their_card()',
                override_table);
        END IF;
    END LOOP;
    FOREACH catalog_table IN ARRAY ARRAY['project_cards', 'property_object_cards',
                                         'property_object_display_overrides', 'building_display_overrides'] LOOP
        EXECUTE format(
            'CREATE OR REPLACE TRIGGER catalog_retention_changes_nothing BEFORE UPDATE ON catalog.%I '
            'FOR EACH STATEMENT WHEN (current_user = ''catalog_retention'') '
            'EXECUTE FUNCTION catalog.catalog_retention_changes_nothing()', catalog_table);
    END LOOP;
END $$;

COMMIT;

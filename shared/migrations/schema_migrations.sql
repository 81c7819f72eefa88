-- Every statement on {{schema}}.schema_migrations, the migrator's
-- bookkeeping: Apply runs them and Print writes them into its script, so a
-- schema migrated by hand is recorded exactly as one the migrator
-- migrated. Not a migration: the migrations are the files named NNNN_*.sql.

-- name: pin_path
-- The first statement of every migration transaction. Migrations name every
-- object of ours schema-qualified; with the path pinned, a built-in
-- operator or type cannot be shadowed by one planted in a schema the
-- migrating login can see.
SET LOCAL search_path = pg_catalog, pg_temp;

-- name: lock_timeout
-- Bounds every lock wait of an attempt (see ApplyWith), for the
-- transaction only.
SELECT pg_catalog.set_config('lock_timeout', @lock_timeout, true);

-- name: lock
-- Serialises the migrators of one schema. A transaction-level lock ends
-- with the transaction, so nothing is left on a pooled connection.
SELECT pg_advisory_xact_lock(hashtext('outboxkeeper.migrate'), hashtext({{schema_name}}));

-- name: schema_exists
-- Asked before CREATE SCHEMA IF NOT EXISTS, which checks the CREATE
-- privilege on the database before it looks.
SELECT to_regnamespace({{schema_name}}) IS NOT NULL;

-- name: refuse_foreign_schema
-- A schema of that name that outboxkeeper did not make is refused before
-- anything is created: migrating it would put our tables beside someone
-- else's, or fail half-way on a name they already use. Ours has a
-- schema_migrations table with a name column (another tool's bookkeeping
-- table, golang-migrate's (version, dirty) say, does not count); an empty
-- schema, made by a DBA for outboxkeeper to fill, is accepted. It runs
-- after pin_path, so every name below resolves in pg_catalog.
DO $$
DECLARE
    v_objects text;
    v_count   bigint;
BEGIN
    IF pg_catalog.to_regnamespace({{schema_name}}) IS NULL THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT FROM pg_catalog.pg_attribute a
               WHERE a.attrelid = pg_catalog.to_regclass('{{schema}}.schema_migrations')
                 AND a.attname = 'name' AND NOT a.attisdropped) THEN
        RETURN;
    END IF;
    SELECT count(*), string_agg(o.what, ', ' ORDER BY o.what) FILTER (WHERE o.n <= 5)
    INTO v_count, v_objects
    FROM (SELECT w.what, row_number() OVER (ORDER BY w.what) AS n
          FROM (SELECT CASE c.relkind WHEN 'r' THEN 'table ' WHEN 'v' THEN 'view ' WHEN 'S' THEN 'sequence '
                                      WHEN 'm' THEN 'materialized view ' WHEN 'p' THEN 'table '
                                      WHEN 'f' THEN 'foreign table ' ELSE 'relation ' END
                           || c.relname AS what
                FROM pg_catalog.pg_class c
                WHERE c.relnamespace = pg_catalog.to_regnamespace({{schema_name}})
                  AND c.relkind <> ALL (ARRAY['i', 'I', 't', 'c']::"char"[])
                UNION ALL
                SELECT 'function ' || p.oid::pg_catalog.regprocedure::text
                FROM pg_catalog.pg_proc p WHERE p.pronamespace = pg_catalog.to_regnamespace({{schema_name}})
                UNION ALL
                SELECT 'type ' || t.typname
                FROM pg_catalog.pg_type t
                WHERE t.typnamespace = pg_catalog.to_regnamespace({{schema_name}})
                  AND t.typrelid = 0 AND t.typcategory <> 'A') AS w) AS o;
    IF v_count > 0 THEN
        RAISE EXCEPTION 'schema % already exists in database % and is not an outboxkeeper schema: it holds % object(s) (%), and no %.schema_migrations of ours; nothing was changed',
            {{schema_name}}, pg_catalog.current_database(), v_count, v_objects, {{schema_name}}
            USING ERRCODE = 'duplicate_schema',
                  HINT = 'Choose another outbox schema (OUTBOX_SCHEMA, or --schema), or move what that schema holds elsewhere.';
    END IF;
END
$$;

-- name: create_schema
CREATE SCHEMA IF NOT EXISTS {{schema}};

-- name: create_table
-- checksum: the SHA-256 of the file, hex; NULL for rows recorded before
-- checksums were. compatible: the file was marked outboxkeeper:compatible,
-- so an older build may run on this schema.
CREATE TABLE IF NOT EXISTS {{schema}}.schema_migrations (
    name       text PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now(),
    checksum   text,
    compatible boolean NOT NULL DEFAULT false
);

-- name: columns_exist
-- Asked before add_columns: ALTER TABLE locks the table even when IF NOT
-- EXISTS makes it a no-op.
SELECT count(*) = 2 FROM pg_catalog.pg_attribute
WHERE attrelid = '{{schema}}.schema_migrations'::regclass
  AND attname IN ('checksum', 'compatible') AND NOT attisdropped;

-- name: add_columns
-- Upgrades a table made before checksums were recorded.
ALTER TABLE {{schema}}.schema_migrations
    ADD COLUMN IF NOT EXISTS checksum text,
    ADD COLUMN IF NOT EXISTS compatible boolean NOT NULL DEFAULT false;

-- name: applied
SELECT name, checksum FROM {{schema}}.schema_migrations;

-- name: backfill
-- A row applied before checksums were recorded gets the checksum of the
-- file as this build has it: trusted once, compared from then on.
UPDATE {{schema}}.schema_migrations AS m SET checksum = f.checksum
FROM unnest(@names::text[], @checksums::text[]) AS f(name, checksum)
WHERE m.name = f.name AND m.checksum IS NULL;

-- name: record
INSERT INTO {{schema}}.schema_migrations (name, checksum, compatible)
VALUES (@name, @checksum, @compatible);

-- name: status
-- Through to_jsonb, so a table made before checksums were recorded (no
-- checksum or compatible column) reads the same way.
SELECT to_jsonb(m) FROM {{schema}}.schema_migrations AS m;

-- name: applied_at
-- When the migration @name was applied, NULL if it was not.
SELECT max(applied_at) FROM {{schema}}.schema_migrations WHERE name = @name;

-- name: applied_in
-- Whether a migration was applied in the transaction stamped @at: a row a
-- migration wrote carries its transaction's now(), which is also the
-- applied_at it recorded, and no other transaction shares that timestamp.
SELECT EXISTS (SELECT 1 FROM {{schema}}.schema_migrations WHERE applied_at = @at);

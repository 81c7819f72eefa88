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

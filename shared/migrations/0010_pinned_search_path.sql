-- The two functions that ran with the caller's search_path now run with
-- pg_catalog, pg_temp, like every SECURITY DEFINER one since 0006.
-- outboxkeeper:compatible (function settings only)
--
-- Why: a built-in operator that needs an implicit cast loses to an
-- exact-typed one planted in any schema on the caller's search_path
-- (public, on PostgreSQL 14 and older, is writable by everyone).
-- allocation_head compares oid = regclass; the notification trigger
-- builds its payload with text || bigint, and runs at COMMIT as whoever
-- publishes. With the path pinned, only pg_catalog's operators are found.
ALTER FUNCTION {{schema}}.allocation_head() SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.notify_published() SET search_path = pg_catalog, pg_temp;

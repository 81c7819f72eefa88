-- The abandonment proof (docs/design.md §3.3) and its diagnosis: they read
-- only the server's transaction state, no table, and assign no xid.

-- name: check
-- passed: the oldest transaction still running, from a fresh snapshot of
-- this autocommit statement (which has no xid of its own), is newer than
-- the marker, so every transaction older than the marker (every writer of
-- a sequence at or below the marker head) has ended.
-- foreign (§3.7): no transaction at or above the snapshot's xmax had
-- completed when it was taken, and a marker of ours had (the statement
-- that assigned it committed): a marker at or above xmax is not this
-- cluster's (restored from a backup, copied by logical replication, left
-- by a blue/green switch-over), and its proof would wait for ever, or
-- pass on a lie.
SELECT pg_snapshot_xmin(s) > @marker::xid8, pg_snapshot_xmax(s) <= @marker::xid8
FROM pg_current_snapshot() AS s

-- name: blockers
-- The sessions holding the horizon back: an xid (or a snapshot) at least
-- as old as the marker, oldest first, xid holders (the ones the proof
-- waits on) before snapshot holders. xid has no ordering but age() has;
-- xid8::xid drops the epoch to compare with pg_stat_activity's columns.
-- Other roles' state, query and xact_start need pg_read_all_stats; pid,
-- database, user, application_name and the xid columns are visible to
-- everyone, so the xid age always names them.
SELECT pid, database, usename, state, xact_age_s, xid_age, application_name, query, backend_xid, backend_xmin FROM (
    SELECT pid, coalesce(datname, '') AS database, coalesce(usename, '') AS usename,
        coalesce(state, '') AS state,
        extract(epoch FROM now() - xact_start)::float8 AS xact_age_s,
        greatest(coalesce(age(backend_xid), 0), coalesce(age(backend_xmin), 0))::bigint AS xid_age,
        coalesce(application_name, '') AS application_name,
        coalesce(left(query, @query_start::integer), '') AS query,
        coalesce(backend_xid::text, '') AS backend_xid, coalesce(backend_xmin::text, '') AS backend_xmin
    FROM pg_stat_activity
    WHERE pid <> pg_backend_pid()
      AND (age(backend_xid) >= age(@marker::xid8::xid) OR age(backend_xmin) >= age(@marker::xid8::xid))
    UNION ALL
    -- A prepared (two-phase) transaction holds the horizon with no backend
    -- at all, so pg_stat_activity never shows it: named by its gid (pid 0).
    SELECT 0, database, owner, 'prepared transaction ' || gid,
        extract(epoch FROM now() - prepared)::float8,
        age(transaction)::bigint, '', '', transaction::text, ''
    FROM pg_prepared_xacts
    WHERE age(transaction) >= age(@marker::xid8::xid)
) holders
ORDER BY backend_xid = '', xid_age DESC
LIMIT @max_blockers::integer

-- name: next_xid
-- The first xid not yet assigned (a fresh snapshot's xmax), read without
-- assigning one.
SELECT pg_snapshot_xmax(pg_current_snapshot())

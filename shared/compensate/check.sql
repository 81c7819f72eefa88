-- The one statement a batch reads the database with: the allocation head
-- and the status of every distinct reported writer. It assigns no xid, so
-- it holds back no one's horizon. Statuses are the Go constants of
-- decide.go, passed as arguments.

-- name: check
-- The head, to refuse sequences never handed out (§3.5), and xmax, from a
-- MATERIALIZED CTE so they are read once, not once per xid row.
WITH b AS MATERIALIZED (
    SELECT {{schema}}.allocation_head() AS head,
           pg_snapshot_xmax(pg_current_snapshot()) AS xmax)
SELECT b.head, b.xmax, x,
    -- CASE evaluates its branches in order and pg_xact_status is volatile,
    -- so it is never called (nor folded early) for an xid at or above
    -- xmax: it raises "transaction ID is in the future" for one not yet
    -- assigned, which would fail the batch for one bogus report.
    CASE WHEN x IS NULL THEN NULL
        -- NULL: older than the commit log kept, so it ended long ago.
        WHEN x < b.xmax THEN coalesce(pg_xact_status(x), @too_old::text)
        -- xmax is the latest completed xid + 1, not the next xid to be
        -- assigned: a writer that took its xid after the last commit runs
        -- at or above it. No xid at or above it had finished, so it is
        -- running or never existed, told apart by the lock every
        -- transaction holds on its own xid while it runs (pg_locks is
        -- readable by every role). pg_locks shows 32-bit xids, and running
        -- xids lie less than 2^31 above xmax, so anything further is
        -- future whatever pg_locks says. Not held: future, or a writer that
        -- finished between the snapshot and the lock read, which the batch
        -- settles by asking once more.
        WHEN x::text::numeric - b.xmax::text::numeric < 2147483648
         AND EXISTS (SELECT 1 FROM pg_catalog.pg_locks l
                     WHERE l.locktype = 'transactionid' AND l.transactionid = x::xid AND l.granted)
            THEN @in_progress::text
        ELSE @future::text END
FROM b LEFT JOIN unnest(@xids::xid8[]) AS x ON true

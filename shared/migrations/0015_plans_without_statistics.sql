-- The sweep's reset batch as a function whose plan does not depend on the
-- planner's statistics (docs/design.md §6).
-- outboxkeeper:compatible (new functions nothing older calls; read_events keeps its answers and rights; the maintainer keeps its grants)
--
-- After a relay outage the deliveries table is fresh from mass UPDATEs
-- that nothing has analysed yet (autovacuum may be behind, or off), and
-- the planner guesses: it took the stuck rows for a handful, so
--  - it sorted every stuck row to pick a batch's oldest (a bitmap scan of
--    deliveries_delivered_idx, then a sort of all of them), once per
--    batch: a pass over N stuck rows cost N/batch × N;
--  - it joined the update to the locked batch by a nested loop that
--    scanned the whole batch for each row: 999,000 rows thrown away per
--    1,000-row batch, a 10,000-row pass 20 times a bare UPDATE.
--
-- The statement here has one plan whatever the statistics say. Its
-- settings take from the planner every way to a table but one: no sort,
-- no bitmap scan, no sequential scan (each is only priced out, so nothing
-- ever fails for want of one), and each table access below has exactly
-- one way left:
--  - stuck: the oldest stuck rows in the order of deliveries_delivered_idx
--    (delivered_at, id), locked FOR UPDATE SKIP LOCKED: an index scan that
--    reads the batch's rows and stops, however many others are stuck (and
--    however many dead versions they left). Nothing in the statement
--    sorts: the last row locked is found by two aggregates over the batch.
--    A sort the planner could not avoid would carry the settings' penalty
--    into the plan's cost and make it look worth compiling, so jit is off
--    too (compiling one cost 0.3 s, for a batch of 10 ms).
--  - moved: the update finds the very row versions `stuck` locked, by a
--    TID scan (ctid = ANY (ARRAY(...))), and joins nothing. Its
--    compare-and-set is one CASE, which no index can answer: as plain
--    conditions the planner could scan deliveries_delivered_idx for them
--    (every stuck row) and keep the locked ones. It decides
--    from the row's own columns, under the lock this statement holds: a
--    version at a locked ctid is the one judged stuck (nobody can change
--    it before we commit), so its state, delivered_at and redeliveries
--    are the ones the lock re-checked, and the compare-and-set is on
--    them: still delivered, still delivered before the cutoff. A row
--    another session changed after our snapshot but before our lock is
--    locked in its new version, which our snapshot cannot see: the TID
--    scan finds nothing there and the next batch takes it. Rows skipped
--    because another sweep holds them are that sweep's, so each row is
--    reset, and counted, exactly once.
--    A row going back to pending loses its delivered_at (no push is in
--    flight; the relay stamps a fresh one); a dead row keeps it, as the
--    time of its last push. max_redeliveries = 0 means never dead.
--  - totals: sweep_state's running totals, added in the batch's own
--    statement, so they count exactly what committed.
--  - more: whether stuck rows remain after the last one locked: the first
--    of them in the index's order, so one probe of deliveries_delivered_idx
--    whose row comparison is an index condition (the last row's values are
--    scalar subqueries). Asked as EXISTS, with no order to keep, it could
--    be answered from any index that covers delivered rows: analysed, the
--    planner walked deliveries_open_created_idx, every open row, for it.
--
-- SECURITY INVOKER: a caller needs the rights on deliveries and
-- sweep_state the statement uses, and like every function of ours it is
-- not executable by PUBLIC (grant_maintainer, below, grants it).
-- search_path is pinned like every function's that resolves operators
-- (0010): a SET clause costs a batch of a thousand rows nothing
-- measurable.
CREATE FUNCTION {{schema}}.sweep_reset(stuck_after_us bigint, batch_size integer, max_redeliveries integer)
RETURNS TABLE (reset bigint, dead bigint, more boolean)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET jit = off
AS $$
    WITH stuck AS MATERIALIZED (
        SELECT s.ctid, s.id, s.delivered_at
        FROM {{schema}}.deliveries AS s
        WHERE s.state = 'delivered'
          AND s.delivered_at < now() - stuck_after_us * interval '1 microsecond'
        ORDER BY s.delivered_at, s.id
        LIMIT batch_size
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE {{schema}}.deliveries AS d SET
            state        = CASE WHEN max_redeliveries > 0 AND d.redeliveries >= max_redeliveries
                                THEN 'dead' ELSE 'pending' END,
            redeliveries = CASE WHEN max_redeliveries > 0 AND d.redeliveries >= max_redeliveries
                                THEN d.redeliveries ELSE d.redeliveries + 1 END,
            dead_at      = CASE WHEN max_redeliveries > 0 AND d.redeliveries >= max_redeliveries
                                THEN now() ELSE d.dead_at END,
            delivered_at = CASE WHEN max_redeliveries > 0 AND d.redeliveries >= max_redeliveries
                                THEN d.delivered_at ELSE NULL END
        WHERE d.ctid = ANY (ARRAY(SELECT stuck.ctid FROM stuck))
          AND CASE WHEN d.state = 'delivered'
                   THEN d.delivered_at < now() - stuck_after_us * interval '1 microsecond'
                   ELSE false END
        RETURNING d.state
    ), counted AS (
        SELECT count(*) FILTER (WHERE moved.state = 'pending') AS reset,
               count(*) FILTER (WHERE moved.state = 'dead') AS dead
        FROM moved
    ), totals AS (
        UPDATE {{schema}}.sweep_state SET
            resets_total = resets_total + (SELECT counted.reset FROM counted),
            dead_total   = dead_total + (SELECT counted.dead FROM counted)
        WHERE id AND (SELECT counted.reset + counted.dead FROM counted) > 0
        RETURNING 1
    ), last_at AS (
        SELECT max(stuck.delivered_at) AS delivered_at FROM stuck
    ), last AS (
        SELECT last_at.delivered_at,
               (SELECT max(stuck.id) FROM stuck WHERE stuck.delivered_at = last_at.delivered_at) AS id
        FROM last_at
    )
    SELECT
        (SELECT counted.reset FROM counted),
        (SELECT counted.dead FROM counted),
        (SELECT r.id FROM {{schema}}.deliveries AS r
            WHERE r.state = 'delivered'
              AND r.delivered_at < now() - stuck_after_us * interval '1 microsecond'
              AND (r.delivered_at, r.id) > ((SELECT last.delivered_at FROM last), (SELECT last.id FROM last))
            ORDER BY r.delivered_at, r.id
            LIMIT 1) IS NOT NULL
$$;

-- The fill's page read (docs/design.md §4): the sequences present after
-- `after`, at most `page` of them, in order. It is one range scan of
-- events_pkey from `after`, which stops at the page's last row, whatever
-- the statistics: as a plain statement, on a table the planner took for
-- not much larger than the page (never analysed, or after a mass UPDATE)
-- it read the whole table and sorted it instead. The same settings as
-- sweep_reset's leave the index as the only way to the order.
CREATE FUNCTION {{schema}}.present_after(after bigint, page integer)
RETURNS SETOF bigint
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET jit = off
AS $$
    SELECT e.sequence FROM {{schema}}.events AS e
    WHERE e.sequence > present_after.after
    ORDER BY e.sequence
    LIMIT present_after.page
$$;

-- read_events (0012) is never compiled: the planner compiles a plan whose
-- estimated cost passes jit_above_cost, and its kept generic plan's
-- estimate grows with the table (on a 1M-row table never analysed it is
-- about a tenth of the threshold), so on a table some ten times that every
-- call would pay 10 ms or more of compiling for a page of 100 rows. Its
-- plan is otherwise already the same range scan whatever the statistics.
ALTER FUNCTION {{schema}}.read_events(bigint, integer) SET jit = off;

-- Like every function of ours, the two above are executable only by who
-- is granted them: the functions' role, as in 0011, and now these.
REVOKE EXECUTE ON FUNCTION {{schema}}.sweep_reset(bigint, integer, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.present_after(bigint, integer) FROM PUBLIC;
CREATE OR REPLACE FUNCTION {{schema}}.grant_maintainer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.allocation_head(), '
        '{{schema}}.sweep_reset(bigint, integer, integer), {{schema}}.present_after(bigint, integer) TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (sequence, filled_by), DELETE ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE ON {{schema}}.fill_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.sweep_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.prune_state TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.consumers TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (reported_at) ON {{schema}}.stall_skips TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (state, redeliveries, delivered_at, dead_at), DELETE '
        'ON {{schema}}.deliveries TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.schema_migrations TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'maintainer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;
SELECT {{schema}}.regrant_roles();

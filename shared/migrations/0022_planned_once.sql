-- The sweep's reset and the prune's batches planned once per server
-- connection (docs/design.md §6, §6b).
-- outboxkeeper:compatible (sweep_reset keeps its arguments, answers and rights; new functions nothing older calls; the maintainer keeps every grant)
--
-- The functions' pool sends every statement unnamed (for the pooler), so
-- a statement's text is parsed and planned again on each call; so was
-- sweep_reset's body, a LANGUAGE sql function with SET clauses (never
-- inlined, its plan kept only for the calling statement). As plpgsql with
-- plan_cache_mode = force_generic_plan, as read_events (0012), each query
-- of a body is planned once per server connection and kept: the same plan
-- for every argument, which the settings below make the one plan there is
-- whatever the statistics say. A relcache invalidation (ANALYZE,
-- autovacuum, DDL) replans it, under the same settings.

-- ---------------------------------------------------------------- sweep
-- The statement of 0015, unchanged and still one statement (one snapshot:
-- the lock, the compare-and-set, the totals and the probe), now kept
-- planned. CREATE OR REPLACE keeps the function's grants.
CREATE OR REPLACE FUNCTION {{schema}}.sweep_reset(stuck_after_us bigint, batch_size integer, max_redeliveries integer)
RETURNS TABLE (reset bigint, dead bigint, more boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH stuck AS MATERIALIZED (
        SELECT s.ctid, s.id, s.delivered_at
        FROM {{schema}}.deliveries AS s
        WHERE s.state = 'delivered'
          AND s.delivered_at < now() - sweep_reset.stuck_after_us * interval '1 microsecond'
        ORDER BY s.delivered_at, s.id
        LIMIT sweep_reset.batch_size
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE {{schema}}.deliveries AS d SET
            state        = CASE WHEN sweep_reset.max_redeliveries > 0 AND d.redeliveries >= sweep_reset.max_redeliveries
                                THEN 'dead' ELSE 'pending' END,
            redeliveries = CASE WHEN sweep_reset.max_redeliveries > 0 AND d.redeliveries >= sweep_reset.max_redeliveries
                                THEN d.redeliveries ELSE d.redeliveries + 1 END,
            dead_at      = CASE WHEN sweep_reset.max_redeliveries > 0 AND d.redeliveries >= sweep_reset.max_redeliveries
                                THEN now() ELSE d.dead_at END,
            delivered_at = CASE WHEN sweep_reset.max_redeliveries > 0 AND d.redeliveries >= sweep_reset.max_redeliveries
                                THEN d.delivered_at ELSE NULL END
        WHERE d.ctid = ANY (ARRAY(SELECT stuck.ctid FROM stuck))
          AND CASE WHEN d.state = 'delivered'
                   THEN d.delivered_at < now() - sweep_reset.stuck_after_us * interval '1 microsecond'
                   ELSE false END
        RETURNING d.state
    ), counted AS (
        SELECT count(*) FILTER (WHERE moved.state = 'pending') AS n_reset,
               count(*) FILTER (WHERE moved.state = 'dead') AS n_dead
        FROM moved
    ), totals AS (
        UPDATE {{schema}}.sweep_state SET
            resets_total = resets_total + (SELECT counted.n_reset FROM counted),
            dead_total   = dead_total + (SELECT counted.n_dead FROM counted)
        WHERE id AND (SELECT counted.n_reset + counted.n_dead FROM counted) > 0
        RETURNING 1
    ), last_at AS (
        SELECT max(stuck.delivered_at) AS delivered_at FROM stuck
    ), last AS (
        SELECT last_at.delivered_at,
               (SELECT max(stuck.id) FROM stuck WHERE stuck.delivered_at = last_at.delivered_at) AS id
        FROM last_at
    )
    SELECT
        (SELECT counted.n_reset FROM counted),
        (SELECT counted.n_dead FROM counted),
        (SELECT r.id FROM {{schema}}.deliveries AS r
            WHERE r.state = 'delivered'
              AND r.delivered_at < now() - sweep_reset.stuck_after_us * interval '1 microsecond'
              AND (r.delivered_at, r.id) > ((SELECT last.delivered_at FROM last), (SELECT last.id FROM last))
            ORDER BY r.delivered_at, r.id
            LIMIT 1) IS NOT NULL;
END
$$;

-- ---------------------------------------------------------------- prune
-- One batch of the delivery prune: among the ids [first, first + batch),
-- first the first id after p_cursor (one probe of the primary key), the
-- acked rows past p_acked_us and the dead rows past p_dead_us
-- (microseconds; NULL keeps that state), each delete one range scan of
-- the primary key. Each delete's own row count is what it deleted, so no
-- row is returned, kept or counted again: a row another pass deleted
-- first is in neither count (each row counts once), and a row moved back
-- to pending since the snapshot stays (the condition is checked again on
-- its latest version). The dead rows' delete is skipped when the acked
-- rows filled the range: nothing else is left in it. The answer: what
-- went, by state, the next cursor (the range's last id) and whether the
-- pass is done, as the statement of deliveries.sql said before.
-- The settings leave the planner the range scan only, whatever the
-- statistics and whatever the generic plan guesses for the range.
CREATE FUNCTION {{schema}}.prune_deliveries(p_cursor bigint, p_batch integer, p_acked_us bigint,
    p_dead_us bigint, p_shortest_us bigint,
    OUT acked bigint, OUT dead bigint, OUT next_cursor bigint, OUT done boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_first bigint;
    v_max   bigint;
BEGIN
    acked := 0;
    dead := 0;
    -- The range's start, and the table's highest id, one probe of each end
    -- of the primary key. The far end is read before the deletes: read
    -- after them, the probe would walk back through every entry the pass
    -- has deleted, this batch's in the first place.
    SELECT (SELECT min(f.id) FROM {{schema}}.deliveries AS f WHERE f.id > p_cursor),
        (SELECT max(n.id) FROM {{schema}}.deliveries AS n)
    INTO v_first, v_max;
    IF v_first IS NULL THEN
        next_cursor := p_cursor;
        done := true;
        RETURN;
    END IF;
    next_cursor := v_first + p_batch - 1;
    IF p_acked_us IS NOT NULL THEN
        DELETE FROM {{schema}}.deliveries AS d
        WHERE d.id >= v_first AND d.id < v_first + p_batch
          AND d.state = 'acked' AND d.acked_at < now() - p_acked_us * interval '1 microsecond';
        GET DIAGNOSTICS acked = ROW_COUNT;
    END IF;
    IF p_dead_us IS NOT NULL AND acked < p_batch THEN
        DELETE FROM {{schema}}.deliveries AS d
        WHERE d.id >= v_first AND d.id < v_first + p_batch
          AND d.state = 'dead' AND d.dead_at < now() - p_dead_us * interval '1 microsecond';
        GET DIAGNOSTICS dead = ROW_COUNT;
    END IF;
    done := CASE
        -- Nothing lies after the range.
        WHEN v_max < v_first + p_batch THEN true
        WHEN acked + dead = p_batch THEN false
        -- The range kept a row created too recently to be past either
        -- retention (asked only when it kept any): created_at grows with
        -- the id, so the pass stops there rather than read the young tail.
        ELSE EXISTS (SELECT 1 FROM {{schema}}.deliveries AS y
            WHERE y.id >= v_first AND y.id < v_first + p_batch
              AND y.created_at >= now() - p_shortest_us * interval '1 microsecond')
    END;
END
$$;

-- One batch of the event prune: the events of [first, last] recorded
-- longer than p_older_than_us ago, one range scan of the primary key,
-- first the first sequence after p_cursor and last at most p_batch on and
-- never above upto: the fill watermark, the slowest registered consumer
-- and a relay's parked event not re-sent yet, read in the batch itself
-- (each only grows, so a bound read earlier could only be lower). The
-- delete's row count is what it deleted, each row once. The answer: the
-- count, the next cursor and whether the pass is done, as the statement of
-- events.sql said before.
CREATE FUNCTION {{schema}}.prune_events(p_cursor bigint, p_batch integer, p_older_than_us bigint,
    OUT deleted bigint, OUT next_cursor bigint, OUT done boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_sort = off
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    v_first bigint;
    v_last  bigint;
    v_upto  bigint;
BEGIN
    deleted := 0;
    SELECT (SELECT min(f.sequence) FROM {{schema}}.events AS f WHERE f.sequence > p_cursor),
        least(coalesce((SELECT max(w.watermark) FROM {{schema}}.fill_state AS w), 0),
              coalesce((SELECT min(c.position) FROM {{schema}}.consumers AS c), 9223372036854775807),
              coalesce((SELECT min(p.sequence) - 1 FROM {{schema}}.relay_parked AS p
                        WHERE p.resent_at IS NULL AND p.parked_at IS NOT NULL), 9223372036854775807))
    INTO v_first, v_upto;
    v_last := least(v_first + p_batch - 1, v_upto);
    IF v_first IS NULL OR v_last < v_first THEN
        next_cursor := p_cursor;
        done := true;
        RETURN;
    END IF;
    DELETE FROM {{schema}}.events AS e
    WHERE e.sequence >= v_first AND e.sequence <= v_last
      AND e.recorded_at < now() - p_older_than_us * interval '1 microsecond';
    GET DIAGNOSTICS deleted = ROW_COUNT;
    next_cursor := v_last;
    -- Done: the range reached upto, or it kept a row recorded too
    -- recently (asked only then: when none was kept, the rows gone are the
    -- range, every sequence there being present).
    done := CASE
        WHEN v_last >= v_upto THEN true
        WHEN deleted = v_last - v_first + 1 THEN false
        ELSE EXISTS (SELECT 1 FROM {{schema}}.events AS y
            WHERE y.sequence >= v_first AND y.sequence <= v_last
              AND y.recorded_at >= now() - p_older_than_us * interval '1 microsecond')
    END;
END
$$;

REVOKE EXECUTE ON FUNCTION {{schema}}.prune_deliveries(bigint, integer, bigint, bigint, bigint) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.prune_events(bigint, integer, bigint) FROM PUBLIC;

-- ---------------------------------------------------------------- roles
-- The functions' role: every grant it had, then the prune's two batches.
ALTER FUNCTION {{schema}}.grant_maintainer(regrole) RENAME TO grant_maintainer_before_0022;
CREATE FUNCTION {{schema}}.grant_maintainer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {{schema}}.grant_maintainer_before_0022(grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.prune_deliveries(bigint, integer, bigint, bigint, bigint), '
        '{{schema}}.prune_events(bigint, integer, bigint) TO %s', grantee);
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.grant_maintainer(regrole) FROM PUBLIC;

SELECT {{schema}}.regrant_roles();

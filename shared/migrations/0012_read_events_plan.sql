-- read_events keeps its plan (docs/design.md §2, "The read side").
-- outboxkeeper:compatible (the same function, answers and rights; only its body's language)
--
-- As a LANGUAGE sql function the planner inlined it: no function call, but
-- the function's text parsed, analysed and planned again on every call,
-- prepared statement or not (a prepared call still gets a custom plan each
-- time, the LIMIT being a parameter). For a page of 100 that cost more than
-- reading the page: 2.3 times a bare index range scan of the same rows
-- (BENCHMARKS.md, row 7). As plpgsql its one query is planned once per
-- server connection and kept: plan_cache_mode = force_generic_plan makes
-- the kept plan the generic one, which is the same single index range scan
-- of events_pkey for every position and page size (a custom plan would
-- have to be made anew each call to be any better, and cannot be). A
-- relcache invalidation (ANALYZE, autovacuum, DDL on events) replans it.
--
-- Still not SECURITY DEFINER: it reads with the caller's rights, so the
-- grants of 0009 (SELECT on events and on fill_state.watermark) stay what a
-- reader needs. CREATE OR REPLACE keeps the function's grants.
CREATE OR REPLACE FUNCTION {{schema}}.read_events(after bigint, max integer)
RETURNS TABLE (sequence bigint, xid xid8, topic text, payload jsonb, headers jsonb,
               recorded_at timestamptz, filled_by text)
LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    -- The query of 0007, unchanged: the page read first (LIMIT in the
    -- innermost query), the contiguity test over that page in index
    -- order, no sort.
    RETURN QUERY
    SELECT p.sequence, p.xid, p.topic, p.payload, p.headers, p.recorded_at, p.filled_by
    FROM (
        SELECT e.*,
               count(*) FILTER (WHERE e.sequence > e.passed)
                   OVER (ORDER BY e.sequence ROWS UNBOUNDED PRECEDING) AS above
        FROM (
            SELECT ev.sequence, ev.xid, ev.topic, ev.payload, ev.headers,
                   ev.recorded_at, ev.filled_by,
                   -- A scalar subquery: evaluated once per call.
                   greatest(coalesce(read_events.after, 0), 0,
                            coalesce((SELECT max(f.watermark) FROM {{schema}}.fill_state f), 0)) AS passed
            FROM {{schema}}.events ev
            WHERE ev.sequence > coalesce(read_events.after, 0)
            ORDER BY ev.sequence
            LIMIT least(greatest(coalesce(read_events.max, 0), 0), 10000)
        ) e
    ) p
    WHERE p.sequence <= p.passed OR p.sequence - p.passed = p.above
    ORDER BY p.sequence;
END
$$;

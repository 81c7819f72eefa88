-- The deliver function's statements (docs/design.md §6e) on
-- {{schema}}.deliveries and {{schema}}.recipients (migration 0020). The
-- claim and the probe are functions of the migration, so their plans do
-- not depend on the statistics; every change of a delivery's state after
-- the claim is settle's.

-- name: claim
-- One batch: the oldest pending deliveries, each moved to delivered (with
-- its recipient's target) or to dead (unknown or disabled recipient) in
-- this one statement, committed before any push.
SELECT id, recipient, kind, tenant_id, payload, state, attempts, redeliveries, created_at,
    coalesce(target, ''), coalesce(dead_reason, '')
FROM {{schema}}.deliver_claim(@limit::integer);

-- name: pending_probe
-- The watching tick's probe, carried by the lease poll: whether anything
-- is pending.
SELECT {{schema}}.deliver_oldest_pending() IS NOT NULL

-- name: oldest_pending
-- The DeliverOldestPendingAge metric, read once as a pass ends.
SELECT coalesce({{schema}}.deliver_oldest_pending(), 0);

-- name: settle
-- What the pushes of a batch came to, in one statement: the deliveries a
-- target accepted acked, those a webhook answered 410 dead as gone. Each a
-- compare-and-set from delivered, by primary key: a row the sweep put
-- back meanwhile stays where it is, and is pushed again (at least once).
-- Everything else of the batch stays delivered for the sweep. The
-- compare-and-set is a CASE, which no index can answer: as a plain
-- condition the planner could scan a partial index of every delivered
-- (or pending) row for it and keep the batch's; this way the primary key
-- is the one way to the rows, whatever the statistics.
WITH acked AS (
    UPDATE {{schema}}.deliveries
    SET state = 'acked', acked_at = clock_timestamp()
    WHERE id = ANY (@acked::bigint[]) AND CASE WHEN state = 'delivered' THEN true ELSE false END
    RETURNING id
), gone AS (
    UPDATE {{schema}}.deliveries
    SET state = 'dead', dead_at = now(), dead_reason = 'gone'
    WHERE id = ANY (@gone::bigint[]) AND CASE WHEN state = 'delivered' THEN true ELSE false END
    RETURNING id
)
SELECT (SELECT count(*) FROM acked), (SELECT count(*) FROM gone);

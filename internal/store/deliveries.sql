-- Every statement on {{schema}}.deliveries, whoever runs it: the
-- application's enqueue and the relay's claim, mark and ack
-- (shared/outbox), the deliver function's claim, probes and settle
-- (shared/deliver), the sweep's reset, counts and wake, the prune's
-- delete, and the CLI's figures and retries. Every statement that changes
-- a delivery's state is here.

-- name: enqueue
INSERT INTO {{schema}}.deliveries (recipient, kind, tenant_id, payload)
VALUES (@recipient, @kind, @tenant_id, @payload)
RETURNING id;

-- name: claim_pending
-- SKIP LOCKED lets several relays claim disjoint rows without waiting on
-- each other; the locks last as long as the caller's transaction.
SELECT id, recipient, kind, tenant_id, payload, state, attempts, redeliveries,
    created_at, delivered_at, acked_at, dead_at
FROM {{schema}}.deliveries
WHERE state = 'pending'
ORDER BY id
LIMIT @limit
FOR UPDATE SKIP LOCKED;

-- name: mark_delivered
-- A compare-and-set from pending. clock_timestamp(), not now(): a relay that
-- claims, pushes and marks in one transaction would otherwise stamp the
-- claim's time, and a push slower than SWEEP_STUCK_AFTER would look stuck
-- the moment it commits.
UPDATE {{schema}}.deliveries
SET state = 'delivered', attempts = attempts + 1, delivered_at = clock_timestamp()
WHERE id = @id AND state = 'pending';

-- name: ack
-- A compare-and-set from delivered only: an ack after the sweep reset the
-- row loses, and the relay delivers again (at-least-once).
UPDATE {{schema}}.deliveries
SET state = 'acked', acked_at = clock_timestamp()
WHERE id = @id AND state = 'delivered';

-- name: state_of
-- What a lost compare-and-set found instead.
SELECT state FROM {{schema}}.deliveries WHERE id = @id;

-- name: sweep_reset
-- The sweep's batch (docs/design.md §6), a function so that its plan does
-- not depend on the statistics (migration 0015): it locks the oldest stuck
-- deliveries FOR UPDATE SKIP LOCKED in the order of delivered_at, moves the
-- versions it locked back to pending, or to dead at @max_redeliveries
-- (0: never), re-checking on each that it is still delivered before the
-- cutoff, and says whether stuck rows remain after the last one locked.
-- It also adds what it moved to sweep_state's totals, in the same
-- statement, so they count exactly what committed; it is here, with every
-- other change of a delivery's state.
SELECT reset, dead, more
FROM {{schema}}.sweep_reset(@stuck_after_us::bigint, @batch::integer, @max_redeliveries::integer);

-- name: count_open
-- The sweep's open-work figures over the open rows only (the partial index
-- deliveries_open_created_idx has the same predicate). The cutoff is on
-- the database clock, which stamped the rows: a skewed Lambda clock cannot
-- make a fresh one look stuck. Stuck pending rows are counted by
-- created_at: they have not been pushed for that long; the sweep does not
-- change them, its wake tells the relay to drain them.
SELECT
    count(*) FILTER (WHERE state = 'pending' AND created_at < now() - @stuck_after_us::bigint * interval '1 microsecond'),
    count(*),
    coalesce(extract(epoch FROM now() - min(created_at))::float8, 0)
FROM {{schema}}.deliveries
WHERE state IN ('pending', 'delivered');

-- name: wake
-- Wakes a LISTENing relay. The payload byte for byte as docs/design.md §2
-- writes it (json_build_object would add spaces).
SELECT pg_notify({{schema_name}} || '_deliveries',
    '{"reset":' || @reset::bigint || ',"stuck_pending":' || @stuck_pending::bigint || '}');

-- name: prune
-- One batch of the delivery prune (docs/design.md §6b), in its own
-- transaction: <schema>.prune_deliveries (migration 0022), planned once
-- per server connection, whatever the statistics. Every secondary index
-- covers open rows only, so old acked rows are found the way they were
-- written, in id order: the batch is the range of @batch ids from the
-- first after the cursor, its acked and dead rows past their retention
-- deleted by range scans of the primary key, each counted by its delete's
-- own row count. Retentions are in microseconds, NULL to keep those rows,
-- @shortest_us the shorter of the two that are set; cutoffs are on the
-- database clock, which stamped acked_at and dead_at. It answers with what
-- it deleted (acked, dead), the next cursor (the range's last id) and
-- whether the pass is done.
SELECT acked, dead, next_cursor, done
FROM {{schema}}.prune_deliveries(@cursor::bigint, @batch::integer, @acked_us::bigint, @dead_us::bigint, @shortest_us::bigint);

-- name: status_counts
-- The figures of `outboxkeeper status`: two scans on two partial indexes
-- (open rows, dead rows), never the acked history, and no payload (the
-- operator role cannot read it).
SELECT o.pending, o.delivered, o.stuck, o.oldest_open_s, d.dead, d.oldest_dead_s
FROM (SELECT count(*) FILTER (WHERE state = 'pending') AS pending,
        count(*) FILTER (WHERE state = 'delivered') AS delivered,
        count(*) FILTER (WHERE state = 'delivered'
            AND delivered_at < now() - @stuck_after_us::bigint * interval '1 microsecond') AS stuck,
        extract(epoch FROM now() - min(created_at))::float8 AS oldest_open_s
    FROM {{schema}}.deliveries
    WHERE state IN ('pending', 'delivered')) AS o,
    (SELECT count(*) AS dead, extract(epoch FROM now() - min(dead_at))::float8 AS oldest_dead_s
    FROM {{schema}}.deliveries
    WHERE state = 'dead') AS d;

-- name: list_dead
-- Newest first, through deliveries_dead_idx; @older_than_us 0 lists any.
-- dead_reason is the deliver function's; NULL for the sweep's (its
-- redelivery limit).
SELECT id, recipient, kind, tenant_id, attempts, redeliveries, created_at, delivered_at, dead_at, dead_reason
FROM {{schema}}.deliveries
WHERE state = 'dead' AND dead_at <= now() - @older_than_us::bigint * interval '1 microsecond'
ORDER BY dead_at DESC, id DESC
LIMIT @limit;

-- name: retry_ids
-- A retry puts the sweep's columns back to where a fresh delivery starts
-- (docs/design.md §12): redeliveries to 0, or the row would be dead again
-- on its next stuck push; delivered_at cleared, as the sweep's reset does
-- (no push is in flight); attempts stay, as the row's history. By id, one
-- compare-and-set: only rows still dead move. The answer names every id
-- asked for, whether it moved, and the state it had in the statement's
-- snapshot (the reason one did not).
WITH moved AS (
    UPDATE {{schema}}.deliveries
    SET state = 'pending', redeliveries = 0, dead_at = NULL, delivered_at = NULL
    WHERE id = ANY (@ids::bigint[]) AND state = 'dead'
    RETURNING id)
SELECT a.id, m.id IS NOT NULL, coalesce(d.state, '')
FROM unnest(@ids::bigint[]) AS a(id)
LEFT JOIN moved AS m ON m.id = a.id
LEFT JOIN {{schema}}.deliveries AS d ON d.id = a.id
ORDER BY a.id;

-- name: retry_older
-- retry_ids' change to every row dead longer than @older_than_us, oldest
-- first, at most @limit: picked under FOR UPDATE SKIP LOCKED (a row the
-- sweep or a relay holds is theirs this instant), moved only if still dead.
-- It answers with how many moved and how many more match (the statement's
-- snapshot counts the moved ones too).
WITH picked AS MATERIALIZED (
    SELECT id FROM {{schema}}.deliveries
    WHERE state = 'dead' AND dead_at <= now() - @older_than_us::bigint * interval '1 microsecond'
    ORDER BY dead_at, id
    LIMIT @limit
    FOR UPDATE SKIP LOCKED
), moved AS (
    UPDATE {{schema}}.deliveries
    SET state = 'pending', redeliveries = 0, dead_at = NULL, delivered_at = NULL
    WHERE id = ANY (ARRAY(SELECT id FROM picked)) AND state = 'dead'
    RETURNING id)
SELECT (SELECT count(*) FROM moved),
    (SELECT count(*) FROM {{schema}}.deliveries
        WHERE state = 'dead' AND dead_at <= now() - @older_than_us::bigint * interval '1 microsecond')
    - (SELECT count(*) FROM moved);

-- name: deliver_claim
-- The deliver function's batch (docs/design.md §6e): the oldest pending
-- deliveries, each moved to delivered (with its recipient's target) or to
-- dead (unknown or disabled recipient) in this one statement, committed
-- before any push. deliver_claim() and deliver_oldest_pending() are
-- migration 0020's, so their plans do not depend on the statistics.
SELECT id, recipient, kind, tenant_id, payload, state, attempts, redeliveries, created_at,
    coalesce(target, ''), coalesce(dead_reason, '')
FROM {{schema}}.deliver_claim(@limit::integer);

-- name: deliver_pending_probe
-- The watching tick's probe, carried by the lease poll: whether anything
-- is pending.
SELECT {{schema}}.deliver_oldest_pending() IS NOT NULL

-- name: deliver_oldest_pending
-- The DeliverOldestPendingAge metric, read once as a pass ends.
SELECT coalesce({{schema}}.deliver_oldest_pending(), 0);

-- name: deliver_settle
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

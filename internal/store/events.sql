-- Every statement on {{schema}}.events, whoever runs it: the application's
-- publish and read (shared/outbox), the relay's read (store.Events), the
-- fill's page read and placeholders, compensate's placeholders, the
-- prune's delete.

-- name: publish
-- publish_batch takes the transaction's xid before it allocates a sequence
-- (docs/design.md §3.1). The xid is read back in the same statement, so a
-- rollback report names it exactly.
SELECT s, pg_current_xact_id()
FROM {{schema}}.publish_batch(@topic, @payloads::jsonb[], @headers) AS s;

-- name: publish_routed
-- Events with routing columns, from the Go library: a plain INSERT, whose
-- defaults take the transaction's xid before they allocate each sequence
-- (the allocator, §3.1), one row per payload in the payloads' order. The
-- xid the rows store is read back, so a rollback report names it exactly.
INSERT INTO {{schema}}.events (topic, payload, headers, aggregate_type, aggregate_id, event_type)
SELECT @topic::text, p.payload, @headers::jsonb, @aggregate_type::text, @aggregate_id::text, @event_type::text
FROM unnest(@payloads::jsonb[]) WITH ORDINALITY AS p (payload, n)
ORDER BY p.n
RETURNING sequence, xid;

-- name: read_events
-- The read side of every language (docs/design.md §2): the rows after the
-- cursor, up to and never past the first missing sequence above the fill
-- watermark. A placeholder's topic, a real event's filled_by and a routing
-- column never written read as ''.
SELECT sequence, xid, coalesce(topic, ''), payload, headers, recorded_at, coalesce(filled_by, ''),
       coalesce(aggregate_type, ''), coalesce(aggregate_id, ''), coalesce(event_type, '')
FROM {{schema}}.read_events(@after, @max);

-- name: present_after
-- The fill's page read: one range scan of the primary key from the cursor,
-- whatever the statistics (the function's settings, docs/design.md §4).
SELECT s FROM {{schema}}.present_after(@after::bigint, @page::integer) AS s;

-- name: allocation_head
SELECT {{schema}}.allocation_head();

-- name: insert_placeholders
-- Placeholders for sequences proven abandoned or reported (docs/design.md
-- §3), never over a row (§3.5). It answers with a count and a range, not
-- the sequences: a batch costs no array to build and send back.
WITH wrote AS (
    INSERT INTO {{schema}}.events (sequence, filled_by)
    SELECT s, @filled_by FROM unnest(@sequences::bigint[]) AS s
    -- Only above the fill watermark: at or below it every sequence is
    -- present or was pruned (§6b), and a placeholder re-created in pruned
    -- history would be the youngest row of the oldest prefix, holding
    -- event retention there. Such a sequence counts as present.
    WHERE s > (SELECT coalesce(max(watermark), 0) FROM {{schema}}.fill_state)
    -- A committed row, or another path's placeholder, is kept; only what
    -- this statement wrote is returned.
    ON CONFLICT (sequence) DO NOTHING
    RETURNING sequence)
SELECT count(*), coalesce(min(sequence), 0), coalesce(max(sequence), 0),
    -- The range written is notified in the same statement (§2), so it goes
    -- out exactly when the rows commit. CASE, unlike AND, guarantees
    -- nothing is notified when nothing was written; the payload is byte
    -- for byte §2's.
    CASE WHEN count(*) > 0
        THEN pg_notify({{schema_name}} || '_events', '{"min":' || min(sequence) || ',"max":' || max(sequence) || '}') IS NOT NULL
        ELSE false END
FROM wrote;

-- name: insert_missing
-- insert_placeholders for sequences the caller has just read as missing,
-- without ON CONFLICT: a plain insert costs less than a speculative one
-- and still never overwrites. A sequence written since the read makes the
-- primary key refuse the whole statement (23505), nothing is written, and
-- the caller sends insert_placeholders instead.
WITH wrote AS (
    INSERT INTO {{schema}}.events (sequence, filled_by)
    SELECT s, @filled_by FROM unnest(@sequences::bigint[]) AS s
    WHERE s > (SELECT coalesce(max(watermark), 0) FROM {{schema}}.fill_state)
    RETURNING sequence)
SELECT count(*), coalesce(min(sequence), 0), coalesce(max(sequence), 0),
    CASE WHEN count(*) > 0
        THEN pg_notify({{schema_name}} || '_events', '{"min":' || min(sequence) || ',"max":' || max(sequence) || '}') IS NOT NULL
        ELSE false END
FROM wrote;

-- name: prune_bound
-- What bounds an event prune pass, for its response: the fill watermark
-- and the slowest registered consumer (the first by position, then name).
-- A relay's parked event not re-sent yet counts as a consumer just before
-- it, named "relay:<relay> (parked)": it was never sent, and a re-send
-- reads it from events.
SELECT coalesce((SELECT max(watermark) FROM {{schema}}.fill_state), 0), c.name, c.position
FROM (SELECT 1) AS one
LEFT JOIN LATERAL (
    SELECT name, position FROM {{schema}}.consumers
    UNION ALL
    SELECT 'relay:' || relay || ' (parked)', min(sequence) - 1 FROM {{schema}}.relay_parked
    WHERE resent_at IS NULL AND parked_at IS NOT NULL GROUP BY relay
    ORDER BY position, name LIMIT 1) AS c ON true;

-- name: prune
-- One batch of the event prune (docs/design.md §6b), in its own
-- transaction: <schema>.prune_events (migration 0022), planned once per
-- server connection, whatever the statistics. The batch is the range of
-- @batch sequences from the first after the cursor, never above the fill
-- watermark, the slowest registered consumer nor a relay's parked event
-- not re-sent, all read in the batch; its rows recorded longer than
-- @older_than_us ago go, in one range scan of the primary key, counted by
-- the delete's own row count. It answers with the count deleted, the next
-- batch's cursor (the last sequence the range covered) and whether the
-- pass is done.
SELECT deleted, next_cursor, done
FROM {{schema}}.prune_events(@cursor::bigint, @batch::integer, @older_than_us::bigint);

-- The statements on <schema>.prune_state (shared/migrations/0008), the
-- prune's own table.

-- name: record
-- An upsert, as the sweep's: an operator who deleted the row gets it back
-- at the next pass. Totals are added in SQL, so overlapping passes never
-- lose each other's counts. events_after is the retention the pass ran
-- with (0: forever), which consumer_status and rewind_consumer read.
INSERT INTO {{schema}}.prune_state AS s (id, passes, last_pass_at, last_deleted_deliveries, last_deleted_events,
    deleted_deliveries_total, deleted_events_total, events_after)
VALUES (true, 1, now(), @deliveries, @events, @deliveries, @events, @events_after_us::bigint * interval '1 microsecond')
ON CONFLICT (id) DO UPDATE SET
    passes                   = s.passes + 1,
    events_after             = excluded.events_after,
    last_pass_at             = now(),
    last_deleted_deliveries  = excluded.last_deleted_deliveries,
    last_deleted_events      = excluded.last_deleted_events,
    deleted_deliveries_total = s.deleted_deliveries_total + excluded.deleted_deliveries_total,
    deleted_events_total     = s.deleted_events_total + excluded.deleted_events_total

-- name: read
-- The one row as an operator sees it.
SELECT passes, last_pass_at, last_deleted_deliveries, last_deleted_events,
    deleted_deliveries_total, deleted_events_total
FROM {{schema}}.prune_state
WHERE id

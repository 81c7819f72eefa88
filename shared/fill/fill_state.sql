-- The statements on <schema>.fill_state (shared/migrations/0003, 0005,
-- 0017): the fill's state between passes. The lease is <schema>.leases,
-- name 'fill' (shared/pass/leases.sql): every statement here that writes
-- the state rides on a lease statement, `WITH lease AS (...)`, and writes
-- only when that one found the lease ours; it reads the lease's columns
-- first.

-- name: load
-- The state, in the statement that takes the lease (or registers as its
-- successor), so a pass that did not get it still reports the watermark.
-- FOR SHARE reads the latest version: a hand-over that committed while
-- the lease statement waited on its row wrote a state this statement's
-- snapshot is older than.
SELECT lease.*,
    f.started, f.watermark, f.historical_head,
    f.cycle_from, f.cycle_first_seen_at, f.cycle_historical, f.cycle_marker, f.cycle_marker_head,
    f.proof_blocked_since
FROM lease, {{schema}}.fill_state AS f
WHERE f.singleton
FOR SHARE OF f

-- name: save
-- The state, riding on a renewal (the checkpoint), the hand-over or the
-- finish: written only while the lease is ours.
UPDATE {{schema}}.fill_state AS f SET
    started = @started,
    -- Only ever raised: a late save cannot move it back.
    watermark = GREATEST(f.watermark, @watermark),
    historical_head = @historical_head,
    cycle_from = @cycle_from,
    cycle_first_seen_at = @cycle_first_seen_at,
    cycle_historical = @cycle_historical,
    cycle_marker = @cycle_marker,
    cycle_marker_head = @cycle_marker_head,
    proof_blocked_since = @proof_blocked_since,
    updated_at = now()
FROM lease
WHERE f.singleton
RETURNING lease.*, f.watermark

-- name: assign_marker
-- The marker (§3.2) is assigned here, by pg_current_xact_id() in this
-- statement, so it is always a later statement than the head read it
-- pairs with, and it is persisted in the same breath: a crash cannot
-- leave a marker the next pass does not know. The xid is this autocommit
-- statement's own (the lease renewal it rides on takes it too); it
-- commits at once, which is all a horizon needs.
UPDATE {{schema}}.fill_state AS f SET
    cycle_from = @cycle_from,
    cycle_first_seen_at = @cycle_first_seen_at,
    cycle_historical = @cycle_historical,
    cycle_marker = pg_current_xact_id(),
    cycle_marker_head = @marker_head,
    proof_blocked_since = NULL,
    updated_at = now()
FROM lease
WHERE f.singleton
RETURNING lease.*, f.cycle_marker

-- name: status
-- The state as an operator sees it, with the head and whether a pass
-- holds the lease: a plain read, which waits on no lock a pass holds.
SELECT {{schema}}.allocation_head(), now(),
    coalesce(l.owner IS NOT NULL AND l.expires_at > now(), false), l.expires_at, f.updated_at,
    f.started, f.watermark, f.historical_head,
    f.cycle_from, f.cycle_first_seen_at, f.cycle_historical, f.cycle_marker, f.cycle_marker_head,
    f.proof_blocked_since
FROM {{schema}}.fill_state AS f
LEFT JOIN {{schema}}.leases AS l ON l.name = @lease
WHERE f.singleton

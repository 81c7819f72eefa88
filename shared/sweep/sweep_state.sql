-- The statements on <schema>.sweep_state (shared/migrations/0004), the
-- sweep's own table. Its running totals are the exception: each reset
-- statement adds what it moved in the same statement (the reset in
-- internal/store), so they stay exact when a pass fails midway.

-- name: record
-- An upsert rather than an update: the migration inserts the one row, but
-- if an operator deleted it the next pass recreates it instead of
-- silently recording nothing. passes is added in SQL, so concurrent passes
-- never lose each other's count.
INSERT INTO {{schema}}.sweep_state AS s (id, passes, last_pass_at, last_reset, last_dead, last_stuck_pending)
VALUES (true, 1, now(), @reset, @dead, @stuck_pending)
ON CONFLICT (id) DO UPDATE SET
    passes             = s.passes + 1,
    last_pass_at       = now(),
    last_reset         = excluded.last_reset,
    last_dead          = excluded.last_dead,
    last_stuck_pending = excluded.last_stuck_pending

-- name: read
-- The one row as an operator sees it.
SELECT passes, last_pass_at, last_reset, last_dead, last_stuck_pending, resets_total, dead_total
FROM {{schema}}.sweep_state
WHERE id

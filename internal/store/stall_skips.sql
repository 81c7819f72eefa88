-- Every statement on {{schema}}.stall_skips. Only skip_stall (migration
-- 0011, SECURITY DEFINER: the caller needs EXECUTE, not INSERT) writes a
-- skip; the fill marks them counted.

-- name: skip_stall
-- One transaction: an operator placeholder for every missing sequence up to
-- @to and the record of who, when and why. skip_stall refuses a range above
-- the head or below the watermark, and never waits on or overwrites a live
-- writer's row.
SELECT id, skipped_at, db_user, operator, reason, from_watermark, to_sequence, head,
    written, first_written, last_written, sessions, reported_at
FROM {{schema}}.skip_stall(@to, @reason, @operator, @sessions::jsonb);

-- name: recent
SELECT id, skipped_at, db_user, operator, reason, from_watermark, to_sequence, head,
    written, first_written, last_written, sessions, reported_at
FROM {{schema}}.stall_skips
ORDER BY id DESC
LIMIT @limit;

-- name: take_unreported
-- Each skip is counted once: the row lock makes a concurrent pass that read
-- the same row re-check reported_at and skip it. The table holds a row per
-- operator action, so a scan is nothing.
WITH taken AS (
    UPDATE {{schema}}.stall_skips SET reported_at = now()
    WHERE reported_at IS NULL
    RETURNING written)
SELECT coalesce(sum(written), 0)::bigint FROM taken;

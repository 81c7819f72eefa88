-- Every statement of the consumers' operations (migration 0021): their
-- status, and an operator's rewind and retire. Only rewind_consumer and
-- retire_consumer (SECURITY DEFINER: the caller needs EXECUTE, not UPDATE
-- or DELETE on consumers) change a consumer, each with its record.

-- name: status
-- Every registered consumer (at most 1000), the slowest first.
SELECT name, position, updated_at, head, watermark, lag, oldest_untaken_at,
    extract(epoch FROM events_after)::float8, holds_retention, held_since
FROM {{schema}}.consumer_status();

-- name: rewind
SELECT id, changed_at, db_user, operator, reason, consumer, action, from_position, to_position
FROM {{schema}}.rewind_consumer(@name, @to, @reason, @operator);

-- name: retire
SELECT id, changed_at, db_user, operator, reason, consumer, action, from_position, to_position
FROM {{schema}}.retire_consumer(@name, @reason, @operator);

-- name: recent
SELECT id, changed_at, db_user, operator, reason, consumer, action, from_position, to_position
FROM {{schema}}.consumer_changes
ORDER BY id DESC
LIMIT @limit;

-- name: summary
-- The consumers' figures for the sweep's metrics, one statement a pass:
-- the largest lag behind the head, how many hold retention back, and the
-- longest any of them has (seconds; 0 when none does).
SELECT coalesce(max(lag), 0)::bigint,
    count(*) FILTER (WHERE holds_retention),
    coalesce(max(extract(epoch FROM now() - held_since)) FILTER (WHERE holds_retention), 0)::float8
FROM {{schema}}.consumer_status();

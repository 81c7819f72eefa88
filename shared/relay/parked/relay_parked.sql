-- The relay's own statements (docs/design.md §6d): its parked events in
-- {{schema}}.relay_parked (migration 0018), what its lease statements
-- carry, and what the CLI reads and asks. The stream itself is read with
-- read_events and the position moved with commit_position (internal/store).
-- @relay is RELAY_NAME; @name is the consumer and lease name,
-- relay:<RELAY_NAME>.

-- name: readable
-- The watching tick's probe, carried by the lease poll (one statement a
-- tick): whether read_events would return anything after the relay's
-- committed position. The first row after it is readable when it is at or
-- below the fill watermark (everything missing there is pruned or proven
-- never written) or right after the position: read_events' own rule.
-- One primary-key probe and two single-row reads, whatever the table's
-- size: min() over a range of the primary key is its first index entry.
SELECT n.first IS NOT NULL AND n.first <= greatest(c.position, w.watermark) + 1
FROM (SELECT coalesce((SELECT position FROM {{schema}}.consumers WHERE name = @name), 0) AS position) c,
    LATERAL (SELECT coalesce(max(watermark), 0) AS watermark FROM {{schema}}.fill_state) w,
    LATERAL (SELECT min(sequence) AS first FROM {{schema}}.events WHERE sequence > c.position) n

-- name: load
-- Rides on taking the lease, so a pass that takes it knows at once where
-- it stands: the relay's position (NULL before it is registered), the
-- fill watermark (where RELAY_START=latest starts), the head, how many
-- parked events an operator asked to have re-sent, and the events the
-- target refused that are not parked yet, with their attempts (at most a
-- few: each holds the position back).
SELECT lease.*,
    (SELECT position FROM {{schema}}.consumers WHERE name = @name) AS position,
    (SELECT coalesce(max(watermark), 0) FROM {{schema}}.fill_state) AS watermark,
    {{schema}}.allocation_head() AS head,
    (SELECT count(*) FROM {{schema}}.relay_parked
        WHERE relay = @relay AND resent_at IS NULL AND resend_requested_at IS NOT NULL) AS resend_due,
    ARRAY(SELECT sequence FROM {{schema}}.relay_parked
        WHERE relay = @relay AND resent_at IS NULL AND parked_at IS NULL ORDER BY sequence LIMIT 10000) AS failing,
    ARRAY(SELECT attempts FROM {{schema}}.relay_parked
        WHERE relay = @relay AND resent_at IS NULL AND parked_at IS NULL ORDER BY sequence LIMIT 10000) AS failing_attempts
FROM lease

-- name: ended
-- Rides on giving the lease back: the head, for the pass's lag.
SELECT lease.*, {{schema}}.allocation_head() AS head FROM lease

-- name: record_refusals
-- The events the target refused for themselves in one send, one row each:
-- the attempts the relay counted (its tries, the first included) and
-- whether they park the event. A row already parked and not re-sent
-- stays as it is (only its last error changes); one that was re-sent
-- before starts afresh. It answers what each row says now, which the
-- relay follows.
INSERT INTO {{schema}}.relay_parked AS p (relay, sequence, topic, attempts, error, parked_at)
SELECT @relay, r.sequence, r.topic, r.attempts, r.error, CASE WHEN r.park THEN now() END
FROM unnest(@sequences::bigint[], @topics::text[], @attempts::integer[], @errors::text[], @park::boolean[])
    AS r(sequence, topic, attempts, error, park)
ON CONFLICT (relay, sequence) DO UPDATE SET
    topic = excluded.topic,
    error = excluded.error,
    last_failed_at = now(),
    attempts = CASE WHEN p.parked_at IS NOT NULL AND p.resent_at IS NULL THEN p.attempts ELSE excluded.attempts END,
    parked_at = CASE WHEN p.parked_at IS NOT NULL AND p.resent_at IS NULL THEN p.parked_at ELSE excluded.parked_at END,
    first_failed_at = CASE WHEN p.resent_at IS NOT NULL THEN now() ELSE p.first_failed_at END,
    resend_requested_at = CASE WHEN p.resent_at IS NOT NULL THEN NULL ELSE p.resend_requested_at END,
    resent_at = NULL
RETURNING sequence, attempts, parked_at IS NOT NULL AS parked

-- name: forget_refusals
-- Events refused before and sent since (the position has passed them, and
-- they were never parked): their rows go, so status counts only what
-- still fails.
DELETE FROM {{schema}}.relay_parked
WHERE relay = @relay AND resent_at IS NULL AND parked_at IS NULL AND sequence <= @position

-- name: resend_due
-- The parked events an operator asked to have re-sent, with the events
-- themselves; present is false for one no longer in events (pruned).
SELECT p.sequence, e.sequence IS NOT NULL AND e.filled_by IS NULL AS present,
    coalesce(e.topic, p.topic) AS topic, e.payload, e.headers, coalesce(e.recorded_at, p.first_failed_at) AS recorded_at
FROM {{schema}}.relay_parked p
LEFT JOIN {{schema}}.events e ON e.sequence = p.sequence
WHERE p.relay = @relay AND p.resent_at IS NULL AND p.resend_requested_at IS NOT NULL
ORDER BY p.sequence
LIMIT @limit

-- name: resend_done
-- What became of re-sent parked events: sent ones are marked resent_at
-- (their row stays as the record); a refused one keeps its place, with
-- the new error and one more attempt, and its request cleared (an
-- operator asks again after fixing the cause). Rows a transient failure
-- left unsent are not named and stay requested.
UPDATE {{schema}}.relay_parked AS p SET
    resent_at = CASE WHEN r.sent THEN now() END,
    resend_requested_at = CASE WHEN r.sent THEN p.resend_requested_at END,
    attempts = CASE WHEN r.sent THEN p.attempts ELSE p.attempts + 1 END,
    error = CASE WHEN r.sent THEN p.error ELSE r.error END,
    last_failed_at = CASE WHEN r.sent THEN p.last_failed_at ELSE now() END
FROM unnest(@sequences::bigint[], @sent::boolean[], @errors::text[]) AS r(sequence, sent, error)
WHERE p.relay = @relay AND p.sequence = r.sequence
  AND p.resent_at IS NULL AND p.resend_requested_at IS NOT NULL

-- name: status
-- Every relay of the schema, for `outboxkeeper relay status`: the ones with
-- a position (consumers named relay:...) and the ones with refused events,
-- each with its position, the head, when it last committed, and its
-- parked, still-failing and to-be-re-sent events.
WITH relays AS (
    SELECT substr(c.name, 7) AS relay, c.position, c.updated_at
    FROM {{schema}}.consumers c
    WHERE c.name LIKE 'relay:%'
), open AS (
    SELECT relay,
        count(*) FILTER (WHERE parked_at IS NOT NULL) AS parked,
        count(*) FILTER (WHERE parked_at IS NULL) AS failing,
        count(*) FILTER (WHERE resend_requested_at IS NOT NULL) AS resend
    FROM {{schema}}.relay_parked
    WHERE resent_at IS NULL
    GROUP BY relay
)
SELECT coalesce(r.relay, o.relay) AS relay, r.position, h.head, r.updated_at,
    coalesce(o.parked, 0) AS parked, coalesce(o.failing, 0) AS failing, coalesce(o.resend, 0) AS resend
FROM relays r
FULL JOIN open o ON o.relay = r.relay
CROSS JOIN (SELECT {{schema}}.allocation_head() AS head) h
ORDER BY 1

-- name: list
-- Parked events (and, with @all, the re-sent ones and those still being
-- tried), for `outboxkeeper relay parked list`; every relay unless @relay
-- names one.
SELECT relay, sequence, topic, attempts, error, first_failed_at, last_failed_at,
    parked_at, resend_requested_at, resent_at
FROM {{schema}}.relay_parked
WHERE (@relay::text IS NULL OR relay = @relay)
  AND (@all::boolean OR (resent_at IS NULL AND parked_at IS NOT NULL))
ORDER BY relay, sequence
LIMIT @limit

-- name: request_resend
-- An operator's request to re-send parked events (`relay parked resend
-- --yes`): the relay sends them at its next pass. Only parked rows not
-- re-sent yet; it answers the rows it marked.
UPDATE {{schema}}.relay_parked SET resend_requested_at = now()
WHERE (@relay::text IS NULL OR relay = @relay)
  AND parked_at IS NOT NULL AND resent_at IS NULL
  AND (@all::boolean OR sequence = ANY (@sequences::bigint[]))
RETURNING relay, sequence

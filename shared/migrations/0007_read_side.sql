-- The read side (docs/design.md §2): what a consumer in any language may
-- read, where it keeps its position, and the notification that wakes it.

-- read_events returns, in sequence order, the events a consumer at
-- position `after` may take: every row up to, never past, the first
-- missing sequence that is not yet proven. A sequence at or below the fill
-- watermark that is absent was pruned (§6b) or never allocated, so it is
-- passed over; above the watermark a missing sequence may still be
-- committed by its writer, so the answer stops before it. Placeholders
-- are returned and marked (filled_by), so a cursor moves over them.
--
-- The cost is one index range scan of the primary key, at most `max`
-- entries, whatever the table's size: the page is read first (LIMIT in
-- the innermost query), and the contiguity test runs over that page only,
-- in the index's order, with no sort. `passed` is the consumer's position
-- or the watermark, whichever is higher: every sequence at or below it is
-- taken as passed. Above it, a row is readable when every sequence from
-- passed + 1 up to it is present, that is when the running count of page
-- rows above `passed` equals sequence - passed; the first gap breaks that
-- for good (the count can never catch up again).
--
-- It is a plain LANGUAGE sql STABLE function, not STRICT and not SECURITY
-- DEFINER, so the planner inlines it: EXPLAIN of a call shows that index
-- scan, and a caller pays no function call. The reader therefore needs
-- SELECT on events and on fill_state (watermark). NULL arguments read as
-- 0; `max` is capped at 10000, so one call is always a bounded amount of
-- work.
CREATE FUNCTION {{schema}}.read_events(after bigint, max integer)
RETURNS TABLE (sequence bigint, xid xid8, topic text, payload jsonb, headers jsonb,
               recorded_at timestamptz, filled_by text)
LANGUAGE sql STABLE AS $$
    SELECT p.sequence, p.xid, p.topic, p.payload, p.headers, p.recorded_at, p.filled_by
    FROM (
        SELECT e.*,
               count(*) FILTER (WHERE e.sequence > e.passed)
                   OVER (ORDER BY e.sequence ROWS UNBOUNDED PRECEDING) AS above
        FROM (
            SELECT events.sequence, events.xid, events.topic, events.payload, events.headers,
                   events.recorded_at, events.filled_by,
                   -- A scalar subquery: evaluated once per call.
                   greatest(coalesce(read_events.after, 0), 0,
                            coalesce((SELECT max(f.watermark) FROM {{schema}}.fill_state f), 0)) AS passed
            FROM {{schema}}.events
            WHERE events.sequence > coalesce(read_events.after, 0)
            ORDER BY events.sequence
            LIMIT least(greatest(coalesce(read_events.max, 0), 0), 10000)
        ) e
    ) p
    WHERE p.sequence <= p.passed OR p.sequence - p.passed = p.above
    ORDER BY p.sequence
$$;

-- A consumer's position: the last sequence it has taken. Prune (§6b) never
-- deletes an event above the slowest position here, so a registered
-- consumer never finds its next events gone; a consumer that stopped for
-- good must be deleted from this table, or it holds retention back.
CREATE TABLE {{schema}}.consumers (
    name       text PRIMARY KEY CONSTRAINT consumers_name_not_empty CHECK (name <> ''),
    position   bigint NOT NULL CONSTRAINT consumers_position_not_negative CHECK (position >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- The slowest consumer first: what prune reads to bound itself.
CREATE INDEX consumers_position_idx ON {{schema}}.consumers (position);

-- commit_position records that consumer `name` has taken every event up to
-- `position`, registering it at first use, and returns the position now
-- stored. A position never moves backwards (GREATEST): a late commit from
-- a slow replica of the consumer cannot undo a later one's, and prune may
-- rely on positions only growing. A position above the allocation head was
-- never handed to a writer, and is refused rather than stored: it would
-- let prune past events nobody has read yet.
--
-- SECURITY DEFINER with a pinned search_path: a consumer's role needs only
-- EXECUTE on it, not write access to the table (which would let it move a
-- position back) nor SELECT on the sequence that allocation_head reads.
CREATE FUNCTION {{schema}}.commit_position(name text, "position" bigint)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_head   bigint;
    v_stored bigint;
BEGIN
    IF commit_position.name IS NULL OR commit_position.name = '' THEN
        RAISE EXCEPTION 'commit_position: the consumer name must not be empty'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF commit_position."position" IS NULL OR commit_position."position" < 0 THEN
        RAISE EXCEPTION 'commit_position: position % for consumer % must be 0 or more',
            coalesce(commit_position."position"::text, 'NULL'), commit_position.name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    v_head := {{schema}}.allocation_head();
    IF commit_position."position" > v_head THEN
        RAISE EXCEPTION 'commit_position: position % for consumer % is above the allocation head %',
            commit_position."position", commit_position.name, v_head
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'A position is the sequence of the last event the consumer took.';
    END IF;
    INSERT INTO {{schema}}.consumers AS c (name, position)
    VALUES (commit_position.name, commit_position."position")
    ON CONFLICT (name) DO UPDATE
        SET position = GREATEST(c.position, excluded.position), updated_at = now()
    RETURNING c.position INTO v_stored;
    RETURN v_stored;
END
$$;

-- The new-event notification: once per committing transaction that
-- published, pg_notify('<schema>_events', '{"min":M,"max":N}') with the
-- first and last sequence the transaction published — the same channel and
-- payload shape as the placeholders' notification, so a listener treats
-- both alike ("something in M..N became readable").
--
-- It is off until switched on with <schema>.set_publish_notifications(true):
-- a NOTIFY costs every publishing transaction (measured with the project's
-- benchmark at about a third more time per one-event transaction, and
-- PostgreSQL serialises the commits of notifying transactions on one
-- queue lock), which only applications with LISTENing consumers should
-- pay. Consumers that poll read_events need none of it.
--
-- PostgreSQL has no commit trigger, so a deferred constraint trigger does
-- it, queued for a transaction's first published row only: its WHEN
-- clause, evaluated as each row is inserted, records the row's sequence as
-- the transaction's last so far and says true only the first time. Both
-- records are transaction-local settings (set_config(..., true)), which a
-- rolled-back savepoint undoes together with the queued trigger event, and
-- which end with the transaction. The WHEN clause calls only built-in
-- functions, so it needs no privilege on this schema's functions whoever
-- inserts. Placeholders (xid NULL) are notified by their own insert.
--
-- A transaction that must not notify while it is on (one that will
-- PREPARE TRANSACTION, which refuses NOTIFY, or a bulk load) sets
-- `SET LOCAL "outboxkeeper.<schema>_events_min" = 'off'` first.
CREATE FUNCTION {{schema}}.notify_published() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- NEW is the transaction's first published row; the setting holds its
    -- last. Byte for byte the placeholders' payload (docs/design.md §2).
    PERFORM pg_notify({{schema_name}} || '_events',
        '{"min":' || NEW.sequence || ',"max":' ||
        coalesce(nullif(current_setting('outboxkeeper.' || {{schema_name}} || '_events_max', true), ''), NEW.sequence::text) || '}');
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER events_notify_published
AFTER INSERT ON {{schema}}.events
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW
WHEN (NEW.xid IS NOT NULL AND CASE
    -- Every row: remember it as the transaction's last (never NULL, so
    -- this branch never decides).
    WHEN pg_catalog.set_config('outboxkeeper.' || {{schema_name}} || '_events_max', NEW.sequence::text, true) IS NULL THEN false
    -- A later row of a transaction already queued (or opted out): no.
    WHEN pg_catalog.current_setting('outboxkeeper.' || {{schema_name}} || '_events_min', true) > '' THEN false
    -- The first: mark the transaction, and queue this row's event.
    ELSE pg_catalog.set_config('outboxkeeper.' || {{schema_name}} || '_events_min', NEW.sequence::text, true) IS NOT NULL
END)
EXECUTE FUNCTION {{schema}}.notify_published();

-- Off by default (see above): switched by the schema's owner, or a role it
-- grants EXECUTE to. ALTER TABLE takes a brief exclusive lock on events.
ALTER TABLE {{schema}}.events DISABLE TRIGGER events_notify_published;

CREATE FUNCTION {{schema}}.set_publish_notifications(enabled boolean) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF enabled THEN
        ALTER TABLE {{schema}}.events ENABLE TRIGGER events_notify_published;
    ELSE
        ALTER TABLE {{schema}}.events DISABLE TRIGGER events_notify_published;
    END IF;
    RETURN enabled;
END
$$;

REVOKE EXECUTE ON FUNCTION {{schema}}.set_publish_notifications(boolean) FROM PUBLIC;

-- The ordered outbox (docs/design.md §2). {{schema}} is the quoted schema name and
-- {{schema_name}} the same name as a string literal.

CREATE SCHEMA IF NOT EXISTS {{schema}};

-- CACHE 1 is load-bearing: with a larger cache a session pre-allocates
-- values that the sequence's last_value already counts but that nobody has
-- handed out yet, so the allocation head would no longer say which
-- sequences a running writer may still hold (docs/design.md §3.2).
CREATE SEQUENCE {{schema}}.events_sequence_seq AS bigint MINVALUE 1 START 1 CACHE 1 NO CYCLE;

CREATE TABLE {{schema}}.events (
    sequence    bigint PRIMARY KEY,
    -- The writer's top-level transaction id, taken before the sequence was
    -- allocated; NULL for placeholders.
    xid         xid8,
    topic       text,
    payload     jsonb,
    headers     jsonb,
    recorded_at timestamptz NOT NULL DEFAULT now(),
    -- NULL for real events; which path wrote a placeholder otherwise.
    filled_by   text,
    CONSTRAINT events_placeholder_shape CHECK ((filled_by IS NULL) = (topic IS NOT NULL)),
    CONSTRAINT events_filled_by_known CHECK (filled_by IN ('fill', 'compensate')),
    CONSTRAINT events_real_has_payload CHECK (filled_by IS NOT NULL OR payload IS NOT NULL),
    CONSTRAINT events_placeholder_is_empty CHECK (filled_by IS NULL OR (xid IS NULL AND payload IS NULL AND headers IS NULL))
);

ALTER SEQUENCE {{schema}}.events_sequence_seq OWNED BY {{schema}}.events.sequence;

-- The allocation head: the last sequence handed to any writer, 0 before
-- the first. Reading the sequence relation sees every session's
-- allocations (unlike currval), and CACHE 1 makes that exact: with a larger
-- cache, values a session holds but has not handed out yet would count as
-- allocated, and a placeholder could take a sequence its writer is about to
-- use. So the head refuses to answer for a sequence altered to cache more,
-- which stops the fill and compensate functions instead of letting them
-- fill unsoundly. After setval(seq, n, false) the next value is n, so the
-- head is n - 1.
CREATE FUNCTION {{schema}}.allocation_head() RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_cache bigint;
    v_head  bigint;
BEGIN
    SELECT seqcache INTO v_cache FROM pg_catalog.pg_sequence
    WHERE seqrelid = '{{schema}}.events_sequence_seq'::regclass;
    IF v_cache IS DISTINCT FROM 1 THEN
        RAISE EXCEPTION 'events_sequence_seq has CACHE %, it must be CACHE 1', v_cache
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'ALTER SEQUENCE ' || {{schema_name}} || '.events_sequence_seq CACHE 1';
    END IF;
    SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END INTO v_head
    FROM {{schema}}.events_sequence_seq;
    RETURN v_head;
END
$$;

-- publish_batch is the one-statement publish used by the Go library and by
-- publish(). The order inside is the soundness rule of docs/design.md §3.1: the
-- transaction takes its xid *before* it allocates, so any marker xid taken
-- after a sequence was allocated is newer than that sequence's writer.
CREATE FUNCTION {{schema}}.publish_batch(p_topic text, p_payloads jsonb[], p_headers jsonb DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_xid      xid8 := pg_current_xact_id();  -- first: assigns the xid
    v_payload  jsonb;
    v_sequence bigint;
BEGIN
    IF p_topic IS NULL THEN
        RAISE EXCEPTION 'publish: topic must not be NULL';
    END IF;
    FOREACH v_payload IN ARRAY p_payloads LOOP
        IF v_payload IS NULL THEN
            RAISE EXCEPTION 'publish: payload must not be NULL';
        END IF;
        v_sequence := nextval('{{schema}}.events_sequence_seq');
        INSERT INTO {{schema}}.events (sequence, xid, topic, payload, headers)
        VALUES (v_sequence, v_xid, p_topic, v_payload, p_headers);
        RETURN NEXT v_sequence;
    END LOOP;
END
$$;

-- publish is the SQL way to publish one event from any language. Its
-- parameter names are §2's, so named notation (topic => ...) works;
-- the body reads no table, so they shadow no column.
CREATE FUNCTION {{schema}}.publish(topic text, payload jsonb, headers jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT {{schema}}.publish_batch(topic, ARRAY[payload], headers)
$$;

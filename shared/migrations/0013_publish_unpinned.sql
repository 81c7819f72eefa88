-- publish and publish_batch without a SET clause (docs/design.md §2,
-- "Roles"), and the publish notification's trigger with one.
-- outboxkeeper:compatible (the same functions, answers and rights)
--
-- Both run as the schema's owner (SECURITY DEFINER, 0006), and until now
-- pinned search_path = pg_catalog, pg_temp so a caller could not plant a
-- function, operator or type the owner would then run. A SET clause costs
-- every call a configuration change and its undoing, and the search path
-- computed afresh twice: a third of a one-event transaction with the
-- flushes off, on a pool of four writers (BENCHMARKS.md, row 8). So the
-- pin is replaced by names nobody can shadow: every function, type and
-- relation the bodies name is schema-qualified (pg_catalog.*, the outbox's
-- own), and they use no operator at all (IS NULL is not one; FOREACH,
-- RAISE and RETURN resolve nothing). What else runs inside the insert is
-- bound at its creation, by object id, whatever the caller's search path:
-- the table's defaults and CHECK constraints, the index, the trigger's
-- WHEN clause (0007). The one body that is not, the notification's
-- trigger function, gets the pin instead: it fires once per transaction,
-- and only when the notification is on.
-- TestPublishIgnoresTheCallersSearchPath plants a function, an operator
-- and a type for each name these bodies use and calls both with them
-- first on the path.

CREATE OR REPLACE FUNCTION {{schema}}.publish_batch(p_topic text, p_payloads jsonb[], p_headers jsonb DEFAULT NULL)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    v_xid      pg_catalog.xid8 := pg_catalog.pg_current_xact_id();  -- first: assigns the xid (§3.1)
    v_payload  pg_catalog.jsonb;
    v_sequence bigint;
BEGIN
    IF p_topic IS NULL THEN
        RAISE EXCEPTION 'publish: topic must not be NULL';
    END IF;
    FOREACH v_payload IN ARRAY p_payloads LOOP
        IF v_payload IS NULL THEN
            RAISE EXCEPTION 'publish: payload must not be NULL';
        END IF;
        v_sequence := pg_catalog.nextval('{{schema}}.events_sequence_seq'::pg_catalog.regclass);
        INSERT INTO {{schema}}.events (sequence, xid, topic, payload, headers)
        VALUES (v_sequence, v_xid, p_topic, v_payload, p_headers);
        RETURN NEXT v_sequence;
    END LOOP;
END
$$;

-- publish is one event, so it no longer goes through publish_batch: one
-- SECURITY DEFINER call instead of two, and no array.
CREATE OR REPLACE FUNCTION {{schema}}.publish(topic text, payload jsonb, headers jsonb DEFAULT NULL)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER AS $$
DECLARE
    v_xid      pg_catalog.xid8 := pg_catalog.pg_current_xact_id();  -- first: assigns the xid (§3.1)
    v_sequence bigint;
BEGIN
    IF publish.topic IS NULL THEN
        RAISE EXCEPTION 'publish: topic must not be NULL';
    END IF;
    IF publish.payload IS NULL THEN
        RAISE EXCEPTION 'publish: payload must not be NULL';
    END IF;
    v_sequence := pg_catalog.nextval('{{schema}}.events_sequence_seq'::pg_catalog.regclass);
    INSERT INTO {{schema}}.events (sequence, xid, topic, payload, headers)
    VALUES (v_sequence, v_xid, publish.topic, publish.payload, publish.headers);
    RETURN v_sequence;
END
$$;

ALTER FUNCTION {{schema}}.notify_published() SET search_path = pg_catalog, pg_temp;

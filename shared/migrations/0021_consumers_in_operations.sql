-- Consumers and relays in operations (docs/design.md §2 "The read side",
-- §4 "Rewinding and retiring a consumer"): what each consumer holds back,
-- and an operator's rewind and retire through SECURITY DEFINER functions,
-- on the record as stall_skips are.
-- outboxkeeper:compatible (a table, a nullable column, functions and grants; older code reads none of them)
--
-- The grant functions are extended by wrapping, not restated: the version
-- this migration finds (whatever a migration before it made it) is kept
-- under a second name and called first, so nothing an earlier migration
-- grants is lost here.

-- ---------------------------------------------------------------- retention
-- The prune's event retention as its last pass ran with it
-- (PRUNE_EVENTS_AFTER; NULL until a pass of this version ran, 0 when
-- events are kept forever), so whoever asks whether a consumer holds
-- retention back uses the prune's own figure, not a copy of it.
ALTER TABLE {{schema}}.prune_state ADD COLUMN events_after interval;

-- ---------------------------------------------------------------- the record
-- One row per rewind or retire: who, when, why, from and to. Only
-- rewind_consumer and retire_consumer insert here (nobody is granted
-- INSERT), so a change cannot happen without its record.
CREATE TABLE {{schema}}.consumer_changes (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at    timestamptz NOT NULL DEFAULT now(),
    -- Who: the login (session_user, which the caller cannot choose) and
    -- the person the CLI names (--operator), as in stall_skips.
    db_user       text NOT NULL,
    operator      text NOT NULL,
    reason        text NOT NULL,
    consumer      text NOT NULL,
    action        text NOT NULL CONSTRAINT consumer_changes_action_known CHECK (action IN ('rewind', 'retire')),
    -- The position before, and after a rewind (NULL after a retire: the
    -- row is gone, and a later commit_position registers it anew).
    from_position bigint NOT NULL,
    to_position   bigint,
    CONSTRAINT consumer_changes_reason_given CHECK (btrim(reason) <> ''),
    CONSTRAINT consumer_changes_operator_given CHECK (btrim(operator) <> ''),
    CONSTRAINT consumer_changes_to_of_rewind CHECK ((action = 'rewind') = (to_position IS NOT NULL)),
    CONSTRAINT consumer_changes_rewind_backwards CHECK (to_position IS NULL OR to_position < from_position)
);

-- ---------------------------------------------------------------- status
-- Every registered consumer (at most 1000, the slowest first) as the
-- person on call and the sweep's ConsumerLag metric see it: its position,
-- when it last moved, its lag behind the allocation head, the oldest event
-- it has not taken at or below the fill watermark, and whether it holds
-- retention back: that event is older than the prune's retention, so only
-- this consumer's position keeps it (and everything after it) from being
-- deleted. held_since is when that began (the event's recorded_at plus
-- the retention). SECURITY DEFINER: the operator reads no event; it sees
-- a timestamp, not a payload. One primary-key probe per consumer.
CREATE FUNCTION {{schema}}.consumer_status()
RETURNS TABLE (name text, "position" bigint, updated_at timestamptz, head bigint, watermark bigint,
               lag bigint, oldest_untaken_at timestamptz, events_after interval,
               holds_retention boolean, held_since timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
#variable_conflict use_column
DECLARE
    v_head      bigint := {{schema}}.allocation_head();
    v_watermark bigint := coalesce((SELECT max(f.watermark) FROM {{schema}}.fill_state f), 0);
    v_after     interval := (SELECT p.events_after FROM {{schema}}.prune_state p WHERE p.id);
BEGIN
    RETURN QUERY
    SELECT c.name, c.position, c.updated_at, v_head, v_watermark,
           greatest(v_head - c.position, 0), o.recorded_at, v_after,
           -- Retention off (0) or not known yet (NULL): nothing is held.
           coalesce(v_after > interval '0' AND o.recorded_at < now() - v_after, false),
           CASE WHEN v_after > interval '0' AND o.recorded_at < now() - v_after THEN o.recorded_at + v_after END
    FROM (SELECT c0.name, c0.position, c0.updated_at FROM {{schema}}.consumers c0
          ORDER BY c0.position, c0.name LIMIT 1000) c
    LEFT JOIN LATERAL (
        SELECT e.recorded_at FROM {{schema}}.events e
        WHERE e.sequence > c.position AND e.sequence <= v_watermark
        ORDER BY e.sequence LIMIT 1) o ON true
    ORDER BY c.position, c.name;
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.consumer_status() FROM PUBLIC;

-- ---------------------------------------------------------------- rewind
-- rewind_consumer moves a consumer's position back to p_to, so it reads
-- (p_to, position] again, and records it. Forward is commit_position's
-- (which never skips an event a consumer did not take: it is the
-- consumer's own statement); a rewind never moves forward. It refuses,
-- naming the input, when the consumer is not registered, p_to is negative
-- or not below the position, the range is longer than 1,000,000, or an
-- event of the range is no longer there (the prune deleted it): a rewind
-- the consumer cannot read in full is not done at all.
--
-- The prune assumes positions only grow, so the rewind guards against a
-- prune statement running beside it: it locks every row of the range FOR
-- KEY SHARE (a DELETE in progress makes it wait, and a row it deleted is
-- then missing from the count), and with retention on it refuses a range
-- whose oldest row is within five minutes of the retention, which a prune
-- statement whose snapshot predates this commit could still delete.
CREATE FUNCTION {{schema}}.rewind_consumer(p_name text, p_to bigint, p_reason text, p_operator text)
RETURNS {{schema}}.consumer_changes
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '3s' AS $$
DECLARE
    v_from   bigint;
    v_after  interval;
    v_n      bigint;
    v_oldest timestamptz;
    v_row    {{schema}}.consumer_changes;
BEGIN
    IF p_reason IS NULL OR btrim(p_reason) = '' THEN
        RAISE EXCEPTION 'rewind_consumer: a reason is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_operator IS NULL OR btrim(p_operator) = '' THEN
        RAISE EXCEPTION 'rewind_consumer: the operator''s name is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.position INTO v_from FROM {{schema}}.consumers c WHERE c.name = p_name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'rewind_consumer: no consumer named "%" is registered', p_name
            USING ERRCODE = 'no_data_found';
    END IF;
    IF p_to IS NULL OR p_to < 0 THEN
        RAISE EXCEPTION 'rewind_consumer: position % for consumer % must be 0 or more', coalesce(p_to::text, 'NULL'), p_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_to >= v_from THEN
        RAISE EXCEPTION 'rewind_consumer: consumer % stands at %; a rewind goes back, to below it (not %)', p_name, v_from, p_to
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_from - p_to > 1000000 THEN
        RAISE EXCEPTION 'rewind_consumer: (%, %] spans % sequences; rewind at most 1000000 at a time', p_to, v_from, v_from - p_to
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT count(*), min(l.recorded_at) INTO v_n, v_oldest
    FROM (SELECT e.recorded_at FROM {{schema}}.events e
          WHERE e.sequence > p_to AND e.sequence <= v_from FOR KEY SHARE) l;
    IF v_n <> v_from - p_to THEN
        RAISE EXCEPTION 'rewind_consumer: % of the % events in (%, %] are no longer kept (the prune deleted them); nothing was changed', v_from - p_to - v_n, v_from - p_to, p_to, v_from
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Rewind to the oldest event still kept, or later.';
    END IF;
    v_after := (SELECT p.events_after FROM {{schema}}.prune_state p WHERE p.id);
    IF v_after IS NULL THEN
        RAISE EXCEPTION 'rewind_consumer: the prune has not recorded its retention on this schema yet, so it is not known which events it may delete; nothing was changed'
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Run the prune once (it runs every hour), then rewind.';
    END IF;
    IF v_after > interval '0' AND v_oldest < now() - v_after + interval '5 minutes' THEN
        RAISE EXCEPTION 'rewind_consumer: events of (%, %] were recorded at %, within five minutes of the prune''s retention (%); nothing was changed', p_to, v_from, v_oldest, v_after
            USING ERRCODE = 'object_not_in_prerequisite_state',
                  HINT = 'Rewind to a later position.';
    END IF;

    UPDATE {{schema}}.consumers SET position = p_to, updated_at = now() WHERE name = p_name;
    INSERT INTO {{schema}}.consumer_changes (db_user, operator, reason, consumer, action, from_position, to_position)
    VALUES (session_user, btrim(p_operator), btrim(p_reason), p_name, 'rewind', v_from, p_to)
    RETURNING * INTO v_row;
    RETURN v_row;
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.rewind_consumer(text, bigint, text, text) FROM PUBLIC;

-- ---------------------------------------------------------------- retire
-- retire_consumer deletes a consumer that stopped for good, so it no
-- longer holds retention back, and records its last position. A later
-- commit_position under the same name registers it anew.
CREATE FUNCTION {{schema}}.retire_consumer(p_name text, p_reason text, p_operator text)
RETURNS {{schema}}.consumer_changes
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '3s' AS $$
DECLARE
    v_from bigint;
    v_row  {{schema}}.consumer_changes;
BEGIN
    IF p_reason IS NULL OR btrim(p_reason) = '' THEN
        RAISE EXCEPTION 'retire_consumer: a reason is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_operator IS NULL OR btrim(p_operator) = '' THEN
        RAISE EXCEPTION 'retire_consumer: the operator''s name is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    DELETE FROM {{schema}}.consumers c WHERE c.name = p_name RETURNING c.position INTO v_from;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'retire_consumer: no consumer named "%" is registered', p_name
            USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO {{schema}}.consumer_changes (db_user, operator, reason, consumer, action, from_position)
    VALUES (session_user, btrim(p_operator), btrim(p_reason), p_name, 'retire', v_from)
    RETURNING * INTO v_row;
    RETURN v_row;
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.retire_consumer(text, text, text) FROM PUBLIC;

-- ---------------------------------------------------------------- roles
-- The person on call: every grant the operator had, then the consumers'
-- status, rewind and retire, and their record.
ALTER FUNCTION {{schema}}.grant_operator(regrole) RENAME TO grant_operator_before_0021;
CREATE FUNCTION {{schema}}.grant_operator(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {{schema}}.grant_operator_before_0021(grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.consumer_status(), '
        '{{schema}}.rewind_consumer(text, bigint, text, text), {{schema}}.retire_consumer(text, text, text) TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.consumer_changes TO %s', grantee);
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.grant_operator(regrole) FROM PUBLIC;

-- The functions' role: every grant it had, then the consumers' status
-- (the sweep's ConsumerLag metric) and the prune's retention column,
-- which its state upsert writes (UPDATE on prune_state covers it). Not
-- rewind nor retire: a function never moves a consumer.
ALTER FUNCTION {{schema}}.grant_maintainer(regrole) RENAME TO grant_maintainer_before_0021;
CREATE FUNCTION {{schema}}.grant_maintainer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM {{schema}}.grant_maintainer_before_0021(grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.consumer_status() TO %s', grantee);
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.grant_maintainer(regrole) FROM PUBLIC;

SELECT {{schema}}.regrant_roles();

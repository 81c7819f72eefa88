-- The operator's escape hatch past a stalled proof, and the operator role
-- (docs/design.md §2 "Roles", §4 "Skipping a stall").
-- outboxkeeper:compatible (a placeholder kind older code passes like its own, a table, functions and grants)

-- A third kind of placeholder: written by a person with `outboxkeeper
-- skip-stall`, not proven abandoned by the fill nor reported by a writer.
-- The new constraint is NOT VALID on purpose: every existing row satisfied
-- the narrower one dropped here (fill, compensate), so it satisfies this
-- one, and validating would scan the whole table while this transaction
-- holds the ACCESS EXCLUSIVE lock the DROP takes. New rows are checked.
ALTER TABLE {{schema}}.events DROP CONSTRAINT events_filled_by_known;
ALTER TABLE {{schema}}.events ADD CONSTRAINT events_filled_by_known
    CHECK (filled_by IN ('fill', 'compensate', 'operator')) NOT VALID;

-- One row per skip: who, when, why, the range and what was written. Only
-- skip_stall() below inserts here (nobody is granted INSERT), so a skip
-- cannot happen without its record, nor a record without its skip.
CREATE TABLE {{schema}}.stall_skips (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    skipped_at     timestamptz NOT NULL DEFAULT now(),
    -- Who: the database login that ran it (session_user, which the caller
    -- cannot choose), and the person the CLI names (its --operator, by
    -- default the OS user and host), since on-call often shares a login.
    db_user        text NOT NULL,
    operator       text NOT NULL,
    reason         text NOT NULL,
    -- The range (from_watermark, to_sequence]: the fill watermark when it
    -- ran, and the sequence the operator skipped to; head is the
    -- allocation head then (to_sequence never exceeds it, §3.5).
    from_watermark bigint NOT NULL,
    to_sequence    bigint NOT NULL,
    head           bigint NOT NULL,
    -- The placeholders written: the range's missing sequences, nothing
    -- that was present (ON CONFLICT DO NOTHING).
    written        bigint NOT NULL,
    first_written  bigint,
    last_written   bigint,
    -- The sessions the operator was shown as possibly still holding
    -- sequences of the range (the fill's blocked_by list), as JSON.
    sessions       jsonb NOT NULL DEFAULT '[]',
    -- When a fill pass counted this skip in its OperatorFilled metric;
    -- NULL until then, so each skip is counted once.
    reported_at    timestamptz,
    CONSTRAINT stall_skips_reason_given CHECK (btrim(reason) <> ''),
    CONSTRAINT stall_skips_operator_given CHECK (btrim(operator) <> ''),
    CONSTRAINT stall_skips_range CHECK (to_sequence > from_watermark AND to_sequence <= head)
);

-- skip_stall writes an operator placeholder for every missing sequence in
-- (fill watermark, p_to] and records the skip, in one transaction, and
-- returns the record. What it never does:
--  - overwrite: the insert is ON CONFLICT DO NOTHING (§3.5), so a
--    committed row stays, and a live writer that later inserts a sequence
--    of the range fails with a duplicate key instead of being overwritten;
--  - wait on a live writer: a sequence whose row a running transaction
--    has inserted but not committed makes the insert wait for it; the
--    lock_timeout below ends that wait, and the whole skip rolls back
--    (55P03) with nothing written;
--  - go above the allocation head (never allocated, §3.5), below the
--    watermark (nothing there is missing), or further than a million
--    sequences in one call (a typo must not write a billion rows);
--  - run without a reason and an operator's name.
-- SECURITY DEFINER, so the caller needs no INSERT on events or on
-- stall_skips: only EXECUTE, which grant_operator gives (and the owner
-- has); the functions' maintainer role does not get it.
CREATE FUNCTION {{schema}}.skip_stall(p_to bigint, p_reason text, p_operator text, p_sessions jsonb DEFAULT '[]')
RETURNS {{schema}}.stall_skips
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '3s' AS $$
DECLARE
    v_head    bigint := {{schema}}.allocation_head();
    v_started boolean;
    v_from    bigint;
    v_n       bigint;
    v_min     bigint;
    v_max     bigint;
    v_row     {{schema}}.stall_skips;
BEGIN
    IF p_reason IS NULL OR btrim(p_reason) = '' THEN
        RAISE EXCEPTION 'skip_stall: a reason is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_operator IS NULL OR btrim(p_operator) = '' THEN
        RAISE EXCEPTION 'skip_stall: the operator''s name is required' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT started, watermark INTO v_started, v_from FROM {{schema}}.fill_state WHERE singleton;
    IF NOT coalesce(v_started, false) THEN
        RAISE EXCEPTION 'skip_stall: the fill has not anchored its watermark yet; there is no stall to skip'
            USING ERRCODE = 'object_not_in_prerequisite_state';
    END IF;
    IF p_to IS NULL OR p_to > v_head THEN
        RAISE EXCEPTION 'skip_stall: % is above the allocation head %: it was never allocated', p_to, v_head
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_to <= v_from THEN
        RAISE EXCEPTION 'skip_stall: nothing to skip: the fill watermark is already at %', v_from
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_to - v_from > 1000000 THEN
        RAISE EXCEPTION 'skip_stall: (%, %] spans % sequences; skip at most 1000000 at a time', v_from, p_to, p_to - v_from
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    BEGIN
        WITH wrote AS (
            INSERT INTO {{schema}}.events (sequence, filled_by)
            SELECT s, 'operator' FROM generate_series(v_from + 1, p_to) AS s
            ON CONFLICT (sequence) DO NOTHING
            RETURNING sequence
        )
        SELECT count(*), min(sequence), max(sequence) INTO v_n, v_min, v_max FROM wrote;
    EXCEPTION WHEN lock_not_available THEN
        RAISE EXCEPTION 'skip_stall: a running transaction has inserted a sequence of (%, %] and not committed it: a live writer; nothing was written', v_from, p_to
            USING ERRCODE = 'lock_not_available',
                  HINT = 'End that session (outboxkeeper status names the sessions holding the horizon), or skip to below its sequence.';
    END;
    -- The range written, on the channel and in the words of every other
    -- placeholder insert (§2), sent when this transaction commits.
    IF v_n > 0 THEN
        PERFORM pg_notify({{schema_name}} || '_events', '{"min":' || v_min || ',"max":' || v_max || '}');
    END IF;

    INSERT INTO {{schema}}.stall_skips (db_user, operator, reason, from_watermark, to_sequence, head,
                                        written, first_written, last_written, sessions)
    VALUES (session_user, btrim(p_operator), btrim(p_reason), v_from, p_to, v_head,
            v_n, v_min, v_max, coalesce(p_sessions, '[]'))
    RETURNING * INTO v_row;
    RETURN v_row;
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.skip_stall(bigint, text, text, jsonb) FROM PUBLIC;

-- A third kind of role for the record.
ALTER TABLE {{schema}}.role_grants DROP CONSTRAINT role_grants_kind_known;
ALTER TABLE {{schema}}.role_grants ADD CONSTRAINT role_grants_kind_known
    CHECK (kind IN ('writer', 'maintainer', 'operator'));

-- The person on call (the outboxkeeper CLI): read the functions' state and
-- the deliveries' bookkeeping, retry dead deliveries (the same columns the
-- sweep moves), and skip a stall through skip_stall. Not a delivery's
-- payload (SELECT lists every column but it), not an event, not a
-- consumer's position, nothing that allocates or publishes.
CREATE FUNCTION {{schema}}.grant_operator(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.allocation_head(), '
        '{{schema}}.skip_stall(bigint, text, text, jsonb) TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.fill_state, {{schema}}.sweep_state, {{schema}}.prune_state, '
        '{{schema}}.consumers, {{schema}}.stall_skips, {{schema}}.schema_migrations TO %s', grantee);
    EXECUTE format('GRANT SELECT (id, recipient, kind, tenant_id, state, attempts, redeliveries, '
        'created_at, delivered_at, acked_at, dead_at), '
        'UPDATE (state, redeliveries, delivered_at, dead_at) ON {{schema}}.deliveries TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'operator')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.grant_operator(regrole) FROM PUBLIC;

-- The functions' role, as in 0009, and now the skips: the fill reads them
-- and marks each one counted (reported_at) for its OperatorFilled metric.
-- It cannot skip a stall itself (no EXECUTE on skip_stall): a function
-- writes only what it proved or was told by the writer.
CREATE OR REPLACE FUNCTION {{schema}}.grant_maintainer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.allocation_head() TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (sequence, filled_by), DELETE ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE ON {{schema}}.fill_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.sweep_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.prune_state TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.consumers TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (reported_at) ON {{schema}}.stall_skips TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (state, redeliveries, delivered_at, dead_at), DELETE '
        'ON {{schema}}.deliveries TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.schema_migrations TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'maintainer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

-- regrant_roles, as in 0006, with the operator kind.
CREATE OR REPLACE FUNCTION {{schema}}.regrant_roles() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    g record;
    n integer := 0;
BEGIN
    FOR g IN SELECT role_name, kind FROM {{schema}}.role_grants
             WHERE to_regrole(role_name) IS NOT NULL ORDER BY role_name, kind LOOP
        CASE g.kind
            WHEN 'writer' THEN PERFORM {{schema}}.grant_writer(g.role_name::regrole);
            WHEN 'maintainer' THEN PERFORM {{schema}}.grant_maintainer(g.role_name::regrole);
            WHEN 'operator' THEN PERFORM {{schema}}.grant_operator(g.role_name::regrole);
        END CASE;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

SELECT {{schema}}.regrant_roles();

-- The relay (docs/design.md §6d): its parked events, and the maintainer's
-- rights to relay.
-- outboxkeeper:compatible (a new table and grants: older code never looks at either)
--
-- A relay reads the stream through read_events and moves its position,
-- the consumer relay:<RELAY_NAME>, through commit_position, as any
-- consumer does; its lease is a row of leases named the same. What it
-- keeps of its own is here: one row per event a target refused for the
-- event itself (too large, invalid), counting the tries across passes,
-- parked once they reach RELAY_MAX_ATTEMPTS, and re-sent when an operator
-- asks (`outboxkeeper relay parked resend`).

CREATE TABLE {{schema}}.relay_parked (
    -- RELAY_NAME (the consumer is relay:<relay>).
    relay               text NOT NULL
                        CONSTRAINT relay_parked_relay_bound CHECK (octet_length(relay) BETWEEN 1 AND 60),
    sequence            bigint NOT NULL,
    -- The event's topic, so the person on call sees what it was without
    -- a right on events.
    topic               text NOT NULL,
    -- Tries the target refused, the first included.
    attempts            integer NOT NULL CONSTRAINT relay_parked_attempts_positive CHECK (attempts >= 1),
    -- The target's last refusal: its code, then its message.
    error               text NOT NULL,
    first_failed_at     timestamptz NOT NULL DEFAULT now(),
    last_failed_at      timestamptz NOT NULL DEFAULT now(),
    -- Set when the attempts reached RELAY_MAX_ATTEMPTS: the relay's
    -- position has passed the event, unsent. NULL while it is still tried.
    parked_at           timestamptz,
    -- Set by the CLI (relay parked resend); the relay sends the event at
    -- its next pass and sets resent_at, or clears this after a refusal.
    resend_requested_at timestamptz,
    resent_at           timestamptz,
    PRIMARY KEY (relay, sequence),
    CONSTRAINT relay_parked_resend_of_parked CHECK (resend_requested_at IS NULL OR parked_at IS NOT NULL),
    CONSTRAINT relay_parked_resent_was_parked CHECK (resent_at IS NULL OR parked_at IS NOT NULL)
);

-- What is still open (tried, parked, or asked to be re-sent), per relay:
-- every statement of the relay and the CLI reads only these rows, so a
-- long history of re-sent events costs them nothing.
CREATE INDEX relay_parked_open_idx ON {{schema}}.relay_parked (relay, sequence) WHERE resent_at IS NULL;

-- The functions' role, as in 0017, with 0015's sweep_reset and
-- present_after again (0017's version left them out, so a maintainer set
-- up after it could run neither the fill nor the sweep), and now the
-- relay: read_events and commit_position (which never moves a position
-- back; nothing on consumers itself), and its parked events.
CREATE OR REPLACE FUNCTION {{schema}}.grant_maintainer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.allocation_head(), '
        '{{schema}}.sweep_reset(bigint, integer, integer), {{schema}}.present_after(bigint, integer), '
        '{{schema}}.read_events(bigint, integer), {{schema}}.commit_position(text, bigint) TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (sequence, filled_by), DELETE ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE ON {{schema}}.fill_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.leases TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.sweep_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.prune_state TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.consumers TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (reported_at) ON {{schema}}.stall_skips TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (state, redeliveries, delivered_at, dead_at), DELETE '
        'ON {{schema}}.deliveries TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.schema_migrations TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.relay_parked TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'maintainer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

-- The person on call, as in 0017, and now the relays' parked events: list
-- them, and ask for one to be re-sent (resend_requested_at only).
CREATE OR REPLACE FUNCTION {{schema}}.grant_operator(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.allocation_head(), '
        '{{schema}}.skip_stall(bigint, text, text, jsonb) TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.fill_state, {{schema}}.leases, {{schema}}.sweep_state, '
        '{{schema}}.prune_state, {{schema}}.consumers, {{schema}}.stall_skips, {{schema}}.schema_migrations TO %s', grantee);
    EXECUTE format('GRANT SELECT (id, recipient, kind, tenant_id, state, attempts, redeliveries, '
        'created_at, delivered_at, acked_at, dead_at), '
        'UPDATE (state, redeliveries, delivered_at, dead_at) ON {{schema}}.deliveries TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (resend_requested_at) ON {{schema}}.relay_parked TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'operator')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

SELECT {{schema}}.regrant_roles();

-- Leases by name (docs/design.md §4, "The lease"): one table for every
-- function that watches with a lease and hands it over — the fill (name
-- 'fill'), each relay ('relay:<RELAY_NAME>'), deliver ('deliver') — so
-- they share one implementation (shared/pass, leases.sql). The fill's
-- lease moves here from fill_state, as it stands: a pass running during
-- the migration keeps its lease. Older builds read the lease columns of
-- fill_state, which are dropped: not compatible.
--
-- A row per name: created by the first pass that asks for the lease (an
-- upsert), so a new function needs no migration of its own.

CREATE TABLE {{schema}}.leases (
    name            text PRIMARY KEY
                    CONSTRAINT leases_name_bound CHECK (octet_length(name) BETWEEN 1 AND 200),
    -- The holder: a random token per pass, and when the lease runs out
    -- on the database clock unless renewed.
    owner           text,
    expires_at      timestamptz,
    -- A watching pass waiting to be handed the lease, until when.
    successor       text,
    successor_until timestamptz,
    -- A hand-over awaiting the successor's first renewal: the holder that
    -- handed it and when, cleared by any renewal.
    handed_by       text,
    handed_at       timestamptz,
    updated_at      timestamptz NOT NULL DEFAULT now()
);

INSERT INTO {{schema}}.leases (name, owner, expires_at, successor, successor_until, handed_by, handed_at)
SELECT 'fill', lease_owner, lease_expires_at, lease_successor, lease_successor_until, lease_handed_by, lease_handed_at
FROM {{schema}}.fill_state WHERE singleton;

ALTER TABLE {{schema}}.fill_state
    DROP COLUMN lease_owner,
    DROP COLUMN lease_expires_at,
    DROP COLUMN lease_successor,
    DROP COLUMN lease_successor_until,
    DROP COLUMN lease_handed_by,
    DROP COLUMN lease_handed_at;

-- The functions' role, as in 0011, and now the leases: it takes, renews
-- and hands them over (the upsert needs INSERT and UPDATE).
CREATE OR REPLACE FUNCTION {{schema}}.grant_maintainer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.allocation_head() TO %s', grantee);
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
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'maintainer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

-- The person on call, as in 0011, and now the leases (status shows who
-- holds the fill's).
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
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'operator')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

SELECT {{schema}}.regrant_roles();

-- Roles that enforce soundness rule 1 (docs/design.md §2 "Roles", §3.6).
--
-- A writer that calls nextval() itself and inserts later holds a sequence
-- without an xid: a fill marker taken in between can be proven while the
-- writer still runs, a placeholder takes its sequence, and its own insert
-- then fails with a duplicate key. So a writer role may only read
-- events_sequence_seq (no nextval, no setval) and cannot insert into
-- events at all; it publishes through publish()/publish_batch(), which run
-- as the schema's owner (SECURITY DEFINER) and always take the xid first.
--
-- The grant functions below are the supported way to set a role up. They
-- run with the caller's rights (GRANT needs the owner, or a member of the
-- owner's role), and record what they granted in role_grants, so a later
-- migration that extends one of them (CREATE OR REPLACE FUNCTION with the
-- same signature) can hand the new privileges to every role set up before
-- it with one `SELECT {{schema}}.regrant_roles();`.

-- Run as the owner, with a search_path nobody can plant objects in:
-- pg_catalog first, pg_temp last (an unqualified name could otherwise
-- resolve to a caller's temporary table or function). Every name in the
-- bodies is schema-qualified already.
ALTER FUNCTION {{schema}}.publish_batch(text, jsonb[], jsonb)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION {{schema}}.publish(text, jsonb, jsonb)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;

-- Functions are executable by PUBLIC by default; a SECURITY DEFINER one
-- must be granted to whom it is meant for, and nobody else; the head goes
-- with the schema's other rights, to the roles the grant functions set up.
REVOKE EXECUTE ON FUNCTION {{schema}}.publish_batch(text, jsonb[], jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.publish(text, jsonb, jsonb) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.allocation_head() FROM PUBLIC;

-- Who was set up as what, for regrant_roles(). Roles are cluster-wide and
-- may be dropped; a name that no longer exists is skipped, not an error.
CREATE TABLE {{schema}}.role_grants (
    role_name  text NOT NULL,
    kind       text NOT NULL CONSTRAINT role_grants_kind_known CHECK (kind IN ('writer', 'maintainer')),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (role_name, kind)
);

-- The application's role: publish (SQL or the Go library, which calls
-- publish_batch), read events and the allocation head (Outbox.Head, for a
-- consumer's lag), and drive deliveries through the statements of
-- shared/outbox (enqueue, claim FOR UPDATE SKIP LOCKED, mark delivered,
-- ack). Column lists keep it to those statements: it cannot write
-- redeliveries or dead_at (the sweep's), nor delete anything. On
-- events_sequence_seq only SELECT, which reads last_value and allows
-- neither nextval nor setval (those need USAGE or UPDATE).
CREATE FUNCTION {{schema}}.grant_writer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.publish(text, jsonb, jsonb), '
        '{{schema}}.publish_batch(text, jsonb[], jsonb), {{schema}}.allocation_head() TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (recipient, kind, tenant_id, payload), '
        'UPDATE (state, attempts, delivered_at, acked_at) ON {{schema}}.deliveries TO %s', grantee);
    -- deliveries.id's default calls nextval on its own sequence.
    EXECUTE format('GRANT USAGE ON SEQUENCE {{schema}}.deliveries_id_seq TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'writer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

-- The functions' role (fill, sweep, compensate, and the operator CLI):
-- the head (SELECT on the sequence reads last_value; it does not allow
-- nextval or setval), placeholders only (INSERT of sequence and filled_by:
-- a real event needs a topic, which this role cannot write), the
-- functions' own state, the sweep's columns of deliveries, and the
-- migrations table for the schema version check at init. It can neither
-- allocate a sequence nor publish.
CREATE FUNCTION {{schema}}.grant_maintainer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.allocation_head() TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (sequence, filled_by) ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE ON {{schema}}.fill_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.sweep_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (state, redeliveries, delivered_at, dead_at) '
        'ON {{schema}}.deliveries TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.schema_migrations TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'maintainer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

-- Runs the current grant function of every recorded role that still
-- exists, and returns how many grants it renewed: what a migration that
-- extends grant_writer or grant_maintainer calls last.
CREATE FUNCTION {{schema}}.regrant_roles() RETURNS integer
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    g record;
    n integer := 0;
BEGIN
    FOR g IN SELECT role_name, kind FROM {{schema}}.role_grants
             WHERE to_regrole(role_name) IS NOT NULL ORDER BY role_name, kind LOOP
        IF g.kind = 'writer' THEN
            PERFORM {{schema}}.grant_writer(g.role_name::regrole);
        ELSE
            PERFORM {{schema}}.grant_maintainer(g.role_name::regrole);
        END IF;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

REVOKE EXECUTE ON FUNCTION {{schema}}.grant_writer(regrole) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.grant_maintainer(regrole) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION {{schema}}.regrant_roles() FROM PUBLIC;

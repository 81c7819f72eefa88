-- The read side's and prune's rights for the two roles of 0006 (docs/design.md
-- §2 "Roles"), handed to every role set up before by regrant_roles().
-- outboxkeeper:compatible (grants and function bodies only)

-- commit_position is SECURITY DEFINER: whoever may call it moves a
-- consumer's position, which bounds retention. Like publish, it is for
-- the roles the grant functions set up, not for PUBLIC.
REVOKE EXECUTE ON FUNCTION {{schema}}.commit_position(text, bigint) FROM PUBLIC;
-- read_events runs with the caller's rights (it must, to be inlined), so
-- EXECUTE alone gives nothing: what it reads is granted below.
REVOKE EXECUTE ON FUNCTION {{schema}}.read_events(bigint, integer) FROM PUBLIC;

-- The application's role, as in 0006, and now its consumers: read_events
-- (which reads events and the fill watermark, nothing else of fill_state)
-- and commit_position (nothing on consumers itself: a direct UPDATE could
-- move a position back).
CREATE OR REPLACE FUNCTION {{schema}}.grant_writer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.publish(text, jsonb, jsonb), '
        '{{schema}}.publish_batch(text, jsonb[], jsonb), {{schema}}.allocation_head(), '
        '{{schema}}.read_events(bigint, integer), {{schema}}.commit_position(text, bigint) TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT (watermark) ON {{schema}}.fill_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (recipient, kind, tenant_id, payload), '
        'UPDATE (state, attempts, delivered_at, acked_at) ON {{schema}}.deliveries TO %s', grantee);
    -- deliveries.id's default calls nextval on its own sequence.
    EXECUTE format('GRANT USAGE ON SEQUENCE {{schema}}.deliveries_id_seq TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'writer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

-- The functions' role, as in 0006, and now prune: it deletes acked and
-- dead deliveries and old events (a DELETE right; its statements lock the
-- rows they delete first, which DELETE allows), reads the consumers'
-- positions to stay behind the slowest, and keeps its own totals.
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
    EXECUTE format('GRANT SELECT, UPDATE (state, redeliveries, delivered_at, dead_at), DELETE '
        'ON {{schema}}.deliveries TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.schema_migrations TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'maintainer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

SELECT {{schema}}.regrant_roles();

-- The deliver function (docs/design.md §6e): the recipients deliveries
-- name, the reason a delivery died, the claim as one statement, enqueue()
-- for writers in any language, and the roles' rights to all of it.
-- outboxkeeper:compatible (a new table, a nullable column older code never reads, new functions nothing older calls; the roles keep every grant)

-- ---------------------------------------------------------------- recipients
-- A delivery names a recipient; where it goes is the recipient's target,
-- here, managed with `outboxkeeper recipients`. A target is an SQS queue
-- (ARN or URL), an SNS topic ARN, an EventBridge bus ARN, or an https://
-- webhook URL; the CLI checks it when it is added and the deliver function
-- again at every push.
CREATE TABLE {{schema}}.recipients (
    name       text PRIMARY KEY
               CONSTRAINT recipients_name_bound CHECK (octet_length(name) BETWEEN 1 AND 200),
    target     text NOT NULL
               CONSTRAINT recipients_target_bound CHECK (octet_length(target) BETWEEN 1 AND 2048),
    -- A disabled recipient's deliveries die with that reason rather than
    -- wait: the deliver function never leaves a row it cannot push pending.
    enabled    boolean NOT NULL DEFAULT true,
    -- Who added it and why, for the person on call.
    note       text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Why a dead delivery is dead, when the deliver function made it so:
-- unknown_recipient, recipient_disabled, gone (a webhook answered 410).
-- NULL for one the sweep made dead at its redelivery limit. A nullable
-- column without a default: no rewrite of the table.
ALTER TABLE {{schema}}.deliveries ADD COLUMN dead_reason text;

-- ---------------------------------------------------------------- enqueue
-- The Go library's Enqueue for every other language:
--   SELECT outbox.enqueue('billing', 'invoice.paid', convert_to('{"id":7}', 'UTF8'), 'tenant-1');
-- in the application's transaction. SECURITY INVOKER: the writer's own
-- INSERT rights on deliveries; search_path pinned like every function's.
CREATE FUNCTION {{schema}}.enqueue(recipient text, kind text, payload bytea, tenant text DEFAULT NULL)
RETURNS bigint
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
    INSERT INTO {{schema}}.deliveries (recipient, kind, tenant_id, payload)
    VALUES (enqueue.recipient, enqueue.kind, enqueue.tenant, coalesce(enqueue.payload, ''::bytea))
    RETURNING id
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.enqueue(text, text, bytea, text) FROM PUBLIC;

-- ---------------------------------------------------------------- the claim
-- One batch of the deliver function: the oldest pending deliveries, locked
-- FOR UPDATE SKIP LOCKED (concurrent passes claim disjoint rows), each
-- judged by its recipient and moved in the same statement, which commits
-- before any push:
--  - a known, enabled recipient: delivered (attempts + 1, delivered_at on
--    the clock, as mark_delivered does), answered with its target;
--  - an unknown or disabled one: dead, with that reason.
-- A push that then fails leaves the row delivered, and the sweep
-- redelivers or dead-letters it. Its plan is sweep_reset's (0015), the
-- same whatever the statistics: the pending rows in the order of
-- deliveries_pending_idx, stopping at the batch; the update finds the
-- locked versions by a TID scan; each recipient is one probe of its
-- primary key. A row another session changed after our snapshot is not at
-- its locked ctid any more, and the next batch takes it. The CASE re-checks
-- pending on the locked version itself.
CREATE FUNCTION {{schema}}.deliver_claim(batch_size integer)
RETURNS TABLE (id bigint, recipient text, kind text, tenant_id text, payload bytea,
               state text, attempts integer, redeliveries integer, created_at timestamptz,
               target text, dead_reason text)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET jit = off
AS $$
    WITH claimed AS MATERIALIZED (
        SELECT c.ctid
        FROM {{schema}}.deliveries AS c
        WHERE c.state = 'pending'
        ORDER BY c.id
        LIMIT batch_size
        FOR UPDATE SKIP LOCKED
    ), moved AS (
        UPDATE {{schema}}.deliveries AS d SET
            (state, attempts, delivered_at, dead_at, dead_reason) = (
                SELECT CASE WHEN j.reason IS NULL THEN 'delivered' ELSE 'dead' END,
                       d.attempts + CASE WHEN j.reason IS NULL THEN 1 ELSE 0 END,
                       CASE WHEN j.reason IS NULL THEN pg_catalog.clock_timestamp() ELSE d.delivered_at END,
                       CASE WHEN j.reason IS NULL THEN NULL ELSE pg_catalog.now() END,
                       j.reason
                FROM (SELECT CASE (SELECT r.enabled FROM {{schema}}.recipients AS r WHERE r.name = d.recipient)
                                 WHEN true THEN NULL
                                 WHEN false THEN 'recipient_disabled'
                                 ELSE 'unknown_recipient' END AS reason) AS j)
        WHERE d.ctid = ANY (ARRAY(SELECT claimed.ctid FROM claimed))
          AND CASE WHEN d.state = 'pending' THEN true ELSE false END
        RETURNING d.id, d.recipient, d.kind, d.tenant_id, d.payload, d.state, d.attempts,
                  d.redeliveries, d.created_at, d.dead_reason
    )
    SELECT m.id, m.recipient, m.kind, m.tenant_id, m.payload, m.state, m.attempts, m.redeliveries,
           m.created_at,
           CASE WHEN m.state = 'delivered'
                THEN (SELECT r.target FROM {{schema}}.recipients AS r WHERE r.name = m.recipient) END,
           m.dead_reason
    FROM moved AS m
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.deliver_claim(integer) FROM PUBLIC;

-- How long the oldest pending delivery has waited, in seconds (NULL when
-- none waits): the watching tick's probe, one statement a tick, and the
-- DeliverOldestPendingAge metric. The oldest by id is the first entry of
-- deliveries_pending_idx, one probe whatever the acked history's size and
-- whatever the statistics (the settings as deliver_claim's).
CREATE FUNCTION {{schema}}.deliver_oldest_pending()
RETURNS float8
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
SET enable_sort = off
SET enable_bitmapscan = off
SET enable_seqscan = off
SET jit = off
AS $$
    SELECT extract(epoch FROM pg_catalog.now() - p.created_at)::float8
    FROM {{schema}}.deliveries AS p
    WHERE p.state = 'pending'
    ORDER BY p.id
    LIMIT 1
$$;
REVOKE EXECUTE ON FUNCTION {{schema}}.deliver_oldest_pending() FROM PUBLIC;

-- ---------------------------------------------------------------- roles
-- The functions' role, as in 0018 (every earlier grant kept: 0015's
-- sweep_reset and present_after, 0018's read_events, commit_position and
-- relay_parked), and now the deliver function: its claim, its acks and
-- deaths (attempts, acked_at, dead_reason besides 0018's columns), and the
-- recipients it reads.
CREATE OR REPLACE FUNCTION {{schema}}.grant_maintainer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.allocation_head(), '
        '{{schema}}.sweep_reset(bigint, integer, integer), {{schema}}.present_after(bigint, integer), '
        '{{schema}}.read_events(bigint, integer), {{schema}}.commit_position(text, bigint), '
        '{{schema}}.deliver_claim(integer), {{schema}}.deliver_oldest_pending() TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (sequence, filled_by), DELETE ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE ON {{schema}}.fill_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.leases TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.sweep_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE ON {{schema}}.prune_state TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.consumers TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (reported_at) ON {{schema}}.stall_skips TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (state, attempts, redeliveries, delivered_at, acked_at, dead_at, dead_reason), DELETE '
        'ON {{schema}}.deliveries TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.schema_migrations TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON {{schema}}.relay_parked TO %s', grantee);
    EXECUTE format('GRANT SELECT ON {{schema}}.recipients TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'maintainer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

-- The application's role, as in 0019, and now enqueue().
CREATE OR REPLACE FUNCTION {{schema}}.grant_writer(grantee regrole) RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA {{schema}} TO %s', grantee);
    EXECUTE format('GRANT EXECUTE ON FUNCTION {{schema}}.publish(text, jsonb, jsonb, text, text, text), '
        '{{schema}}.publish_batch(text, jsonb[], jsonb), {{schema}}.next_sequence(), {{schema}}.allocation_head(), '
        '{{schema}}.read_events(bigint, integer), {{schema}}.commit_position(text, bigint), '
        '{{schema}}.enqueue(text, text, bytea, text) TO %s', grantee);
    EXECUTE format('GRANT SELECT ON SEQUENCE {{schema}}.events_sequence_seq TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (topic, payload, headers, aggregate_type, aggregate_id, event_type) '
        'ON {{schema}}.events TO %s', grantee);
    EXECUTE format('GRANT SELECT (watermark) ON {{schema}}.fill_state TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT (recipient, kind, tenant_id, payload), '
        'UPDATE (state, attempts, delivered_at, acked_at) ON {{schema}}.deliveries TO %s', grantee);
    -- deliveries.id's default calls nextval on its own sequence.
    EXECUTE format('GRANT USAGE ON SEQUENCE {{schema}}.deliveries_id_seq TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'writer')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

-- The person on call, as in 0018, and now the recipients: list, add,
-- disable and remove them (`outboxkeeper recipients`), and read why a
-- delivery died.
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
        'created_at, delivered_at, acked_at, dead_at, dead_reason), '
        'UPDATE (state, redeliveries, delivered_at, dead_at) ON {{schema}}.deliveries TO %s', grantee);
    EXECUTE format('GRANT SELECT, UPDATE (resend_requested_at) ON {{schema}}.relay_parked TO %s', grantee);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE (target, enabled, note, updated_at), DELETE '
        'ON {{schema}}.recipients TO %s', grantee);
    INSERT INTO {{schema}}.role_grants (role_name, kind) VALUES (grantee::text, 'operator')
    ON CONFLICT (role_name, kind) DO NOTHING;
END
$$;

SELECT {{schema}}.regrant_roles();

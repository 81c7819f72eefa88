-- deliver_claim looks a row's recipient up once to move it, not once
-- per column it sets (docs/design.md §6e).
-- outboxkeeper:compatible (deliver_claim keeps its arguments, answers and rights)
--
-- The planner flattens a subquery in FROM into the query around it, and
-- so copied the recipient's lookup into each of the five columns the
-- claim's UPDATE sets: five probes of recipients_pkey a row, six with the
-- target's. CREATE OR REPLACE keeps the function's grants.
CREATE OR REPLACE FUNCTION {{schema}}.deliver_claim(batch_size integer)
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
                                 ELSE 'unknown_recipient' END AS reason
                      -- OFFSET 0 keeps j a subquery, evaluated once a row:
                      -- flattened, its CASE (and so the recipient's
                      -- lookup) would be copied into each of the five
                      -- columns set.
                      OFFSET 0) AS j)
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

-- The delivery outbox (docs/design.md §2): rows pushed to recipients by a relay,
-- acknowledged by them, and redelivered by the sweep when they are not.

CREATE TABLE {{schema}}.deliveries (
    id            bigserial PRIMARY KEY,
    recipient     text NOT NULL,
    kind          text NOT NULL,
    tenant_id     text,
    payload       bytea NOT NULL,
    state         text NOT NULL DEFAULT 'pending',
    attempts      int NOT NULL DEFAULT 0,
    redeliveries  int NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now(),
    delivered_at  timestamptz,
    acked_at      timestamptz,
    dead_at       timestamptz,
    CONSTRAINT deliveries_state_known CHECK (state IN ('pending', 'delivered', 'acked', 'dead')),
    -- A delivered row always says when, since the sweep measures from it.
    CONSTRAINT deliveries_delivered_has_time CHECK (state <> 'delivered' OR delivered_at IS NOT NULL)
);

-- Acked rows are the bulk of the table and nobody looks for them; every
-- index below covers open work only, so the relay and the sweep stay cheap
-- however long the history grows.
CREATE INDEX deliveries_pending_idx ON {{schema}}.deliveries (id) WHERE state = 'pending';
CREATE INDEX deliveries_delivered_idx ON {{schema}}.deliveries (delivered_at, id) WHERE state = 'delivered';
CREATE INDEX deliveries_open_created_idx ON {{schema}}.deliveries (created_at) WHERE state IN ('pending', 'delivered');
-- Dead rows are not acked either (§2): few, and what an operator lists
-- and replays, newest first.
CREATE INDEX deliveries_dead_idx ON {{schema}}.deliveries (dead_at) WHERE state = 'dead';

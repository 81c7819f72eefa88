-- The sweep function's own state (docs/design.md §6): one row of pass totals, so an
-- operator can see when the sweep last ran and how much it has redelivered
-- without searching the logs. Written once per pass, in one statement.

CREATE TABLE {{schema}}.sweep_state (
    -- Always true: the primary key allows exactly one row.
    id                 boolean PRIMARY KEY DEFAULT true CONSTRAINT sweep_state_one_row CHECK (id),
    passes             bigint NOT NULL DEFAULT 0,
    last_pass_at       timestamptz,
    -- What the last pass did, as in its Lambda response.
    last_reset         bigint NOT NULL DEFAULT 0,
    last_dead          bigint NOT NULL DEFAULT 0,
    last_stuck_pending bigint NOT NULL DEFAULT 0,
    -- Running totals since the table was created.
    resets_total       bigint NOT NULL DEFAULT 0,
    dead_total         bigint NOT NULL DEFAULT 0
);

INSERT INTO {{schema}}.sweep_state DEFAULT VALUES;

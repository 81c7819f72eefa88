-- The prune function's own state (docs/design.md §6b): one row of pass
-- totals, so an operator can see when retention last ran and how much it
-- removed without searching the logs. Written once per pass, in one
-- statement (shared/prune/state.go).

CREATE TABLE {{schema}}.prune_state (
    -- Always true: the primary key allows exactly one row.
    id                       boolean PRIMARY KEY DEFAULT true CONSTRAINT prune_state_one_row CHECK (id),
    passes                   bigint NOT NULL DEFAULT 0,
    last_pass_at             timestamptz,
    -- What the last pass deleted, as in its Lambda response.
    last_deleted_deliveries  bigint NOT NULL DEFAULT 0,
    last_deleted_events      bigint NOT NULL DEFAULT 0,
    -- Running totals since the table was created.
    deleted_deliveries_total bigint NOT NULL DEFAULT 0,
    deleted_events_total     bigint NOT NULL DEFAULT 0
);

INSERT INTO {{schema}}.prune_state DEFAULT VALUES;

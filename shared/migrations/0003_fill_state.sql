-- The fill function's state between invocations (docs/design.md §4). A resident gap
-- filler keeps this in memory; a Lambda pass starts cold every minute, so the
-- lease, the watermark and the stall episode live here instead. One row per
-- schema: the fill works one table, and the lease makes it one pass at a time.
-- The statements that touch this table are all in shared/fill/state.go.

CREATE TABLE {{schema}}.fill_state (
    singleton             boolean PRIMARY KEY DEFAULT true CONSTRAINT fill_state_singleton CHECK (singleton),

    -- The lease: a random token per pass, taken and renewed by single
    -- autocommit compare-and-set UPDATEs against the database clock. It
    -- expires on its own (pass budget + a margin), so a crashed pass blocks
    -- the next one for seconds, not forever; no advisory lock, no session
    -- state, so it works through RDS Proxy.
    lease_owner           text,
    lease_expires_at      timestamptz,

    -- false until the first pass anchors the watermark (shared/fill
    -- initialWatermark: at 0 for a young outbox, just below the lowest
    -- present row when older history was pruned) and records the head it
    -- saw as the historical boundary.
    started               boolean NOT NULL DEFAULT false,
    -- Every sequence in (start, watermark] is present; only ever raised
    -- (GREATEST), so a late save from a slow pass cannot move it back.
    watermark             bigint NOT NULL DEFAULT 0,

    -- Historical gaps: missing sequences at or below historical_head (the
    -- head read by the first run, strictly before historical_marker was
    -- assigned) need no grace, one marker and one proof for all of them.
    historical_head       bigint NOT NULL DEFAULT 0,
    historical_marker     xid8,
    historical_proven     boolean NOT NULL DEFAULT false,

    -- The current stall episode: the watermark it stalled at, when a pass
    -- first saw it (grace counts from here, across passes), and once the
    -- grace is over its marker xid and the head read just before it.
    episode_from          bigint,
    episode_first_seen_at timestamptz,
    episode_marker        xid8,
    episode_marker_head   bigint,

    -- Since when the proof has failed to pass (for ProofBlockedSeconds).
    proof_blocked_since   timestamptz,
    updated_at            timestamptz NOT NULL DEFAULT now(),

    CONSTRAINT fill_state_episode_shape CHECK ((episode_from IS NULL) = (episode_first_seen_at IS NULL)),
    CONSTRAINT fill_state_marker_shape CHECK ((episode_marker IS NULL) = (episode_marker_head IS NULL)),
    CONSTRAINT fill_state_marker_in_episode CHECK (episode_marker IS NULL OR episode_from IS NOT NULL)
);

INSERT INTO {{schema}}.fill_state DEFAULT VALUES;

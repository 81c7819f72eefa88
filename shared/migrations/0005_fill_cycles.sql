-- The fill works in cycles (docs/design.md, "The fill pass"): one grace,
-- one marker and one proof per cycle, however many pages and batches the
-- cycle's range (watermark, marker head] spans. Gaps that were there at the
-- first run are simply a cycle without grace, so the separate historical
-- marker goes; and a watching pass hands its lease to the next invocation
-- through a successor slot instead of making it wait for the lease to expire.

ALTER TABLE {{schema}}.fill_state RENAME COLUMN episode_from TO cycle_from;
ALTER TABLE {{schema}}.fill_state RENAME COLUMN episode_first_seen_at TO cycle_first_seen_at;
ALTER TABLE {{schema}}.fill_state RENAME COLUMN episode_marker TO cycle_marker;
ALTER TABLE {{schema}}.fill_state RENAME COLUMN episode_marker_head TO cycle_marker_head;
ALTER TABLE {{schema}}.fill_state RENAME CONSTRAINT fill_state_episode_shape TO fill_state_cycle_shape;
ALTER TABLE {{schema}}.fill_state RENAME CONSTRAINT fill_state_marker_in_episode TO fill_state_marker_in_cycle;

-- A cycle over gaps present at the first run (at or below historical_head):
-- no grace, and its marker head is that first head.
ALTER TABLE {{schema}}.fill_state ADD COLUMN cycle_historical boolean NOT NULL DEFAULT false;

-- A historical marker still at work becomes the current cycle, so an
-- upgrade in the middle of a blocked historical proof keeps its marker.
UPDATE {{schema}}.fill_state SET
    cycle_from = watermark,
    cycle_first_seen_at = now(),
    cycle_historical = true,
    cycle_marker = historical_marker,
    cycle_marker_head = historical_head
WHERE historical_marker IS NOT NULL AND watermark < historical_head AND cycle_from IS NULL;

ALTER TABLE {{schema}}.fill_state DROP COLUMN historical_marker, DROP COLUMN historical_proven;

-- The hand-over: a watching invocation that finds the lease held registers
-- here (refreshing lease_successor_until while it waits); the holder, at
-- its next tick, ends its pass and gives the lease straight to it, so some
-- pass is always watching and the waiter is billed for a tick, not for the
-- rest of the holder's budget. A registration not refreshed is stale and
-- ignored, so a successor that died is never handed anything.
ALTER TABLE {{schema}}.fill_state
    ADD COLUMN lease_successor text,
    ADD COLUMN lease_successor_until timestamptz;

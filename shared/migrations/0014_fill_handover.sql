-- A hand-over the holder can take back (docs/design.md §4, "The lease").
-- outboxkeeper:compatible (two columns older code never reads)
--
-- A watching holder that hands its lease to a registered successor keeps
-- watching until the successor acts as owner: its first renewal, in any
-- statement that renews the lease, clears these two columns. Until then
-- they name the holder that handed over and when; if the successor died
-- in between (it never renews), that holder takes the lease back within a
-- tick instead of leaving the outbox unwatched until the next schedule.
-- An older build's holder never sets them, and an older build's
-- successor never clears them: its holder then takes the lease back, and
-- the older successor ends its pass as one that lost its lease.
ALTER TABLE {{schema}}.fill_state
    ADD COLUMN lease_handed_by text,
    ADD COLUMN lease_handed_at timestamptz;

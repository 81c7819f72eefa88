-- Every statement on {{schema}}.consumers. Positions are written only
-- through commit_position (migrations 0007, 0016), which never moves one
-- backwards and refuses one above the allocation head.

-- name: commit_position
-- Registers the consumer at its first call and answers the position stored,
-- which is higher than the one given when a later one was committed.
SELECT {{schema}}.commit_position(@name, @position);

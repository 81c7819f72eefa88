-- The operator's statements on {{schema}}.recipients (migration 0020), as
-- `outboxkeeper recipients` runs them; a role set up with grant_operator
-- may run each.

-- name: add
-- A new recipient, or a new target for one that exists (enabled again).
INSERT INTO {{schema}}.recipients (name, target, note)
VALUES (@name, @target, @note)
ON CONFLICT (name) DO UPDATE
SET target = excluded.target, note = excluded.note, enabled = true, updated_at = now()
RETURNING (xmax = 0) AS created;

-- name: list
SELECT name, target, enabled, note, created_at, updated_at
FROM {{schema}}.recipients
ORDER BY name;

-- name: set_enabled
UPDATE {{schema}}.recipients SET enabled = @enabled, updated_at = now()
WHERE name = @name;

-- name: remove
-- The recipient only: its deliveries stay, and die as unknown_recipient
-- when they are claimed.
DELETE FROM {{schema}}.recipients WHERE name = @name;

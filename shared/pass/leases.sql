-- The statements on <schema>.leases (shared/migrations/0017): one row per
-- lease name, taken, renewed and handed over by single autocommit
-- compare-and-set statements on the database clock. No advisory lock, no
-- session state. A pass's own state rides on acquire, renew, hand_over and
-- finish: `WITH lease AS (<step>) <the pass's statement>`, which reads the
-- step's columns from `lease` first (lease.go, Lease.Ride).

-- name: acquire
-- Takes the lease when it is free, expired or already @owner's (handed to
-- it, or taken by a statement whose answer was lost), or, for a watching
-- pass (@wait), registers @owner as the successor for @successor_ms. An
-- upsert: the first pass to ask creates the row, and ON CONFLICT DO
-- UPDATE decides every CASE on the latest version of the row, so two
-- passes asking at once cannot both take it.
-- A lease handed to @owner keeps handed_by: taking it is not yet acting
-- as owner (the first renewal is).
INSERT INTO {{schema}}.leases AS l (name, owner, expires_at)
VALUES (@name, @owner, now() + @lease_ms::bigint * interval '1 millisecond')
ON CONFLICT (name) DO UPDATE SET
    owner = CASE WHEN l.owner IS NULL OR l.owner = @owner OR l.expires_at <= now()
        THEN @owner ELSE l.owner END,
    expires_at = CASE WHEN l.owner IS NULL OR l.owner = @owner OR l.expires_at <= now()
        THEN now() + @lease_ms::bigint * interval '1 millisecond' ELSE l.expires_at END,
    handed_by = CASE WHEN (l.owner IS NULL OR l.owner = @owner OR l.expires_at <= now()) AND l.owner IS DISTINCT FROM @owner
        THEN NULL ELSE l.handed_by END,
    handed_at = CASE WHEN (l.owner IS NULL OR l.owner = @owner OR l.expires_at <= now()) AND l.owner IS DISTINCT FROM @owner
        THEN NULL ELSE l.handed_at END,
    -- The successor slot is @owner's when it is empty, its own, or lapsed.
    successor = CASE
        WHEN l.owner IS NULL OR l.owner = @owner OR l.expires_at <= now() THEN nullif(l.successor, @owner)
        WHEN @wait::boolean AND (l.successor IS NULL OR l.successor = @owner OR l.successor_until <= now()) THEN @owner
        ELSE l.successor END,
    successor_until = CASE
        WHEN l.owner IS NULL OR l.owner = @owner OR l.expires_at <= now()
            THEN CASE WHEN l.successor = @owner THEN NULL ELSE l.successor_until END
        WHEN @wait::boolean AND (l.successor IS NULL OR l.successor = @owner OR l.successor_until <= now())
            THEN now() + @successor_ms::bigint * interval '1 millisecond'
        ELSE l.successor_until END,
    updated_at = now()
RETURNING l.owner = @owner AS took, l.owner = @owner AND l.handed_by IS NOT NULL AS handed

-- name: renew
-- Every statement with which the owner renews the lease clears handed_by:
-- the successor's first renewal is what its predecessor waits for. It
-- also says whether a live successor waits, the holder's cue to hand
-- over.
UPDATE {{schema}}.leases SET
    expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
    handed_by = NULL,
    handed_at = NULL,
    updated_at = now()
WHERE name = @name AND owner = @owner
RETURNING successor IS NOT NULL AND coalesce(successor_until > now(), false) AS successor_waiting

-- name: hand_over
-- The lease to a live successor, naming the holder that handed it; without
-- one (its registration lapsed since the tick) a renewal.
UPDATE {{schema}}.leases SET
    owner = CASE WHEN successor IS NOT NULL AND coalesce(successor_until > now(), false) THEN successor ELSE owner END,
    expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
    handed_by = CASE WHEN successor IS NOT NULL AND coalesce(successor_until > now(), false) THEN @owner END,
    handed_at = CASE WHEN successor IS NOT NULL AND coalesce(successor_until > now(), false) THEN now() END,
    successor = NULL,
    successor_until = NULL,
    updated_at = now()
WHERE name = @name AND owner = @owner
RETURNING owner <> @owner AS handed

-- name: finish
-- The last statement of a pass: the lease released. A registered
-- successor takes a free lease at its next poll, as does any pass after.
-- Sent bare, it is also how a pass that does not know whether it holds the
-- lease (the statement that would have told it was lost with its
-- connection) gives it up, writing nothing else.
UPDATE {{schema}}.leases SET
    owner = NULL,
    expires_at = NULL,
    handed_by = NULL,
    handed_at = NULL,
    updated_at = now()
WHERE name = @name AND owner = @owner
RETURNING true AS released

-- name: poll
-- A holder's tick, one read that writes nothing: whether the lease is
-- still ours and whether a successor waits. The pass's probe (the fill's
-- allocation head) takes the place of the NULL at construction, so a
-- watching tick is this one statement.
SELECT NULL AS probe,
    owner IS NOT DISTINCT FROM @owner AS held,
    successor IS NOT NULL AND coalesce(successor_until > now(), false) AS successor_waiting
FROM {{schema}}.leases
WHERE name = @name

-- name: handed_to
-- What a holder that handed the lease over watches, read-only: whether it
-- owns it again (a take-back whose answer was lost), whether its
-- hand-over still waits for the successor's first renewal, and whether it
-- has waited @ack_ms for it.
SELECT owner IS NOT DISTINCT FROM @owner AS owned,
    handed_by IS NOT DISTINCT FROM @owner AS pending,
    coalesce(handed_at + @ack_ms::bigint * interval '1 millisecond' <= now(), true) AS due
FROM {{schema}}.leases
WHERE name = @name

-- name: take_back
-- The lease back from a successor that never acted as owner: its state is
-- still the one the hand-over wrote (a successor that wrote anything had
-- renewed, and cleared handed_by).
UPDATE {{schema}}.leases SET
    owner = @owner,
    expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
    handed_by = NULL,
    handed_at = NULL,
    updated_at = now()
WHERE name = @name AND handed_by = @owner

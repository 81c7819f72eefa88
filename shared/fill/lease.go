package fill

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// The lease: one working pass per schema, held in fill_state's lease
// columns. Taken, renewed and given up by single autocommit compare-and-set
// statements against the database clock (one clock for every Lambda
// environment); it expires on its own a few ticks after its last renewal,
// so a crashed pass blocks the next for seconds, not forever. No advisory
// lock, no session state.
//
// The hand-over: a watching pass that finds the lease held by a live pass
// registers as its successor and polls. The holder sees the registration
// at its next tick and, in one statement, writes its state and makes the
// successor the owner, naming itself in lease_handed_by. It then keeps
// watching the lease, read-only, until the successor acts as owner: the
// successor's first renewal (any statement of its that renews the lease)
// clears lease_handed_by. Only then does the holder end. A successor that
// died before that (after registering, after being handed the lease,
// before its first renewal) never clears it, and the holder takes the
// lease back a tick later and carries on. So consecutive scheduled
// invocations overlap by a tick, not by the rest of a budget, and no
// moment goes unwatched while either is alive.
//
// The lease protects efficiency, not soundness: two passes working at once
// would only repeat each other's reads, since every placeholder is proven
// and written ON CONFLICT DO NOTHING, and every state write is conditioned
// on owning the lease.

// successorWaiting is the SQL truth "a live successor is registered".
const successorWaiting = `(lease_successor IS NOT NULL AND coalesce(lease_successor_until > now(), false))`

// acknowledged is set by every statement with which the owner renews the
// lease: the successor's first renewal is what its predecessor waits for.
const acknowledged = `lease_handed_by = NULL, lease_handed_at = NULL`

// leaseSQL is every statement on the lease columns.
type leaseSQL struct {
	acquire  string
	poll     string
	handOver string
	handedTo string
	takeBack string
	finish   string
	release  string
}

func newLeaseSQL(schema store.Schema) leaseSQL {
	t := schema.Table("fill_state")
	// free: the lease may be taken by @owner. Spelled out in every CASE
	// (not computed once in a subquery) so that a concurrent acquire,
	// which re-evaluates this UPDATE on the row version the other one
	// wrote, decides on that version.
	const free = `(lease_owner IS NULL OR lease_owner = @owner OR lease_expires_at <= now())`
	// queue: @owner may take the successor slot.
	const queue = `(@wait::boolean AND (lease_successor IS NULL OR lease_successor = @owner OR lease_successor_until <= now()))`
	return leaseSQL{
		// One statement takes the lease (when free or expired, or already
		// ours: a pass handed it, or retrying after a dropped connection)
		// or, for a watching pass, registers as successor; and returns
		// the state, so a pass that did not get the lease still reports
		// the watermark. A lease handed to @owner keeps lease_handed_by:
		// taking it is not yet acting as owner. It always writes the row,
		// which is what makes the CASEs see the latest version under
		// concurrency.
		acquire: `UPDATE ` + t + ` SET
				lease_owner = CASE WHEN ` + free + ` THEN @owner ELSE lease_owner END,
				lease_expires_at = CASE WHEN ` + free + ` THEN now() + @lease_ms::bigint * interval '1 millisecond' ELSE lease_expires_at END,
				lease_handed_by = CASE WHEN ` + free + ` AND lease_owner IS DISTINCT FROM @owner THEN NULL ELSE lease_handed_by END,
				lease_handed_at = CASE WHEN ` + free + ` AND lease_owner IS DISTINCT FROM @owner THEN NULL ELSE lease_handed_at END,
				lease_successor = CASE
					WHEN ` + free + ` THEN nullif(lease_successor, @owner)
					WHEN ` + queue + ` THEN @owner
					ELSE lease_successor END,
				lease_successor_until = CASE
					WHEN ` + free + ` THEN CASE WHEN lease_successor = @owner THEN NULL ELSE lease_successor_until END
					WHEN ` + queue + ` THEN now() + @successor_ms::bigint * interval '1 millisecond'
					ELSE lease_successor_until END
			WHERE singleton
			RETURNING lease_owner = @owner, lease_owner = @owner AND lease_handed_by IS NOT NULL, ` + stateColumns,
		// A holder's tick: the head, whether the lease is still ours, and
		// whether a successor waits, in one read that writes nothing.
		poll: `SELECT ` + schema.Table("allocation_head") + `(), lease_owner IS NOT DISTINCT FROM @owner, ` + successorWaiting + `
			FROM ` + t + ` WHERE singleton`,
		// The hand-over: the state, and the lease to a live successor,
		// naming the holder that handed it. Without one (its registration
		// lapsed since the tick) it is a checkpoint. Conditioned on still
		// owning the lease.
		handOver: `UPDATE ` + t + ` SET ` + stateSet + `,
				lease_owner = CASE WHEN ` + successorWaiting + ` THEN lease_successor ELSE lease_owner END,
				lease_expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
				lease_handed_by = CASE WHEN ` + successorWaiting + ` THEN @owner END,
				lease_handed_at = CASE WHEN ` + successorWaiting + ` THEN now() END,
				lease_successor = NULL,
				lease_successor_until = NULL
			WHERE singleton AND lease_owner = @owner
			RETURNING lease_owner <> @owner`,
		// What the holder that handed over watches, read-only: whether its
		// hand-over still waits for the successor's first renewal, and
		// whether it has waited @ack_ms for it.
		handedTo: `SELECT lease_owner IS NOT DISTINCT FROM @owner, lease_handed_by IS NOT DISTINCT FROM @owner,
				coalesce(lease_handed_at + @ack_ms::bigint * interval '1 millisecond' <= now(), true)
			FROM ` + t + ` WHERE singleton`,
		// The lease back from a successor that never acted as owner: the
		// state is still the one the hand-over wrote (a successor that
		// wrote anything has renewed, and cleared lease_handed_by).
		takeBack: `UPDATE ` + t + ` SET
				lease_owner = @owner,
				lease_expires_at = now() + @lease_ms::bigint * interval '1 millisecond',
				` + acknowledged + `
			WHERE singleton AND lease_handed_by = @owner`,
		// The last statement of a pass: the state, and the lease released
		// (a registered successor takes a free lease at its next poll, and
		// so does any invocation after it). Conditioned on still owning it.
		finish: `UPDATE ` + t + ` SET ` + stateSet + `,
				lease_owner = NULL,
				lease_expires_at = NULL,
				` + acknowledged + `
			WHERE singleton AND lease_owner = @owner
			RETURNING true`,
		// The lease released by a pass that does not know whether it holds
		// it (the statement that would have told it was lost with its
		// connection): no state, since it has none it may write.
		release: `UPDATE ` + t + ` SET
				lease_owner = NULL,
				lease_expires_at = NULL,
				` + acknowledged + `
			WHERE singleton AND lease_owner = @owner`,
	}
}

// newOwner is a lease token, unique per pass.
func newOwner() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// acquireLease takes the lease for d if it is free, expired or ours, or
// (wait) registers owner as the successor for successorTTL; it loads the
// state either way. handed says the lease was handed to owner and waits
// for its first renewal.
func (l leaseSQL) acquireLease(ctx context.Context, q store.Querier, owner string, d time.Duration, wait bool, successorTTL time.Duration) (st State, took, handed bool, err error) {
	st, err = scanState(q.QueryRow(ctx, l.acquire, pgx.NamedArgs{
		"owner":        owner,
		"lease_ms":     d.Milliseconds(),
		"wait":         wait,
		"successor_ms": successorTTL.Milliseconds(),
	}), &took, &handed)
	if errors.Is(err, pgx.ErrNoRows) {
		return State{}, false, false, errors.New("fill: fill_state has no row: run the migrations")
	}
	if err != nil {
		return State{}, false, false, fmt.Errorf("take fill lease: %w", err)
	}
	return st, took, handed, nil
}

// tickRead is what a holder reads each tick.
type tickRead struct {
	Head      int64
	Held      bool
	Successor bool
}

func (l leaseSQL) pollTick(ctx context.Context, q store.Querier, owner string) (tickRead, error) {
	var r tickRead
	if err := q.QueryRow(ctx, l.poll, pgx.NamedArgs{"owner": owner}).Scan(&r.Head, &r.Held, &r.Successor); err != nil {
		return r, fmt.Errorf("read allocation head: %w", err)
	}
	return r, nil
}

// handOverLease writes st and makes a live successor the owner (renewed
// for d); handed is false when no successor waited any more, and then the
// lease stays owner's, renewed.
func (l leaseSQL) handOverLease(ctx context.Context, q store.Querier, owner string, st State, d time.Duration) (handed bool, err error) {
	args := stateArgs(st)
	args["owner"], args["lease_ms"] = owner, d.Milliseconds()
	err = q.QueryRow(ctx, l.handOver, args).Scan(&handed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, errLeaseLost
	}
	if err != nil {
		return false, fmt.Errorf("hand the fill lease over: %w", err)
	}
	return handed, nil
}

// handedOver is what a holder that handed its lease over reads while it
// waits: whether it owns the lease again (a take-back whose answer was
// lost), whether the hand-over still waits for the successor's first
// renewal, and whether it has waited long enough to take it back.
type handedOver struct {
	Owned, Pending, Due bool
}

func (l leaseSQL) handOverState(ctx context.Context, q store.Querier, owner string, ack time.Duration) (handedOver, error) {
	var w handedOver
	err := q.QueryRow(ctx, l.handedTo, pgx.NamedArgs{"owner": owner, "ack_ms": ack.Milliseconds()}).Scan(&w.Owned, &w.Pending, &w.Due)
	if err != nil {
		return w, fmt.Errorf("watch the fill lease handed over: %w", err)
	}
	return w, nil
}

// takeLeaseBack takes back, for d, a lease owner handed over and whose
// successor never renewed it; ok is false when the successor renewed
// first.
func (l leaseSQL) takeLeaseBack(ctx context.Context, q store.Querier, owner string, d time.Duration) (ok bool, err error) {
	tag, err := q.Exec(ctx, l.takeBack, pgx.NamedArgs{"owner": owner, "lease_ms": d.Milliseconds()})
	if err != nil {
		return false, fmt.Errorf("take the fill lease back: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// finishPass writes st and releases the lease.
func (l leaseSQL) finishPass(ctx context.Context, q store.Querier, owner string, st State) error {
	args := stateArgs(st)
	args["owner"] = owner
	var ok bool
	err := q.QueryRow(ctx, l.finish, args).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return errLeaseLost
	}
	if err != nil {
		return fmt.Errorf("release fill lease: %w", err)
	}
	return nil
}

// releaseLease gives the lease up if owner holds it, writing nothing else.
func (l leaseSQL) releaseLease(ctx context.Context, q store.Querier, owner string) error {
	if _, err := q.Exec(ctx, l.release, pgx.NamedArgs{"owner": owner}); err != nil {
		return fmt.Errorf("release fill lease: %w", err)
	}
	return nil
}

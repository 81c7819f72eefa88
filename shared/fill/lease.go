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
// environment); it expires on its own, so a crashed pass blocks the next
// for a lease period, not forever. No advisory lock, no session state.
//
// The hand-over: a watching pass that finds the lease held by a live pass
// registers as its successor and polls. The holder sees the registration
// at its next tick, ends its pass and, in its last statement, makes the
// successor the owner. So consecutive scheduled invocations overlap by a
// tick, not by the rest of a budget, and no moment goes unwatched.
//
// The lease protects efficiency, not soundness: two passes working at once
// would only repeat each other's reads, since every placeholder is proven
// and written ON CONFLICT DO NOTHING, and every state write is conditioned
// on owning the lease.

// successorWaiting is the SQL truth "a live successor is registered".
const successorWaiting = `(lease_successor IS NOT NULL AND coalesce(lease_successor_until > now(), false))`

// leaseSQL is every statement on the lease columns.
type leaseSQL struct {
	acquire string
	poll    string
	finish  string
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
		// ours: a pass retrying after a dropped connection) or, for a
		// watching pass, registers as successor; and returns the state,
		// so a pass that did not get the lease still reports the
		// watermark. It always writes the row, which is what makes the
		// CASEs see the latest version under concurrency.
		acquire: `UPDATE ` + t + ` SET
				lease_owner = CASE WHEN ` + free + ` THEN @owner ELSE lease_owner END,
				lease_expires_at = CASE WHEN ` + free + ` THEN now() + @lease_ms::bigint * interval '1 millisecond' ELSE lease_expires_at END,
				lease_successor = CASE
					WHEN ` + free + ` THEN nullif(lease_successor, @owner)
					WHEN ` + queue + ` THEN @owner
					ELSE lease_successor END,
				lease_successor_until = CASE
					WHEN ` + free + ` THEN CASE WHEN lease_successor = @owner THEN NULL ELSE lease_successor_until END
					WHEN ` + queue + ` THEN now() + @successor_ms::bigint * interval '1 millisecond'
					ELSE lease_successor_until END
			WHERE singleton
			RETURNING lease_owner = @owner, ` + stateColumns,
		// A holder's tick: the head, whether the lease is still ours, and
		// whether a successor waits, in one read that writes nothing.
		poll: `SELECT ` + schema.Table("allocation_head") + `(), lease_owner IS NOT DISTINCT FROM @owner, ` + successorWaiting + `
			FROM ` + t + ` WHERE singleton`,
		// The last statement of a pass: the state, and the lease handed to
		// a live successor or released. Conditioned on still owning it.
		finish: `UPDATE ` + t + ` SET ` + stateSet + `,
				lease_owner = CASE WHEN ` + successorWaiting + ` THEN lease_successor END,
				lease_expires_at = CASE WHEN ` + successorWaiting + ` THEN now() + @lease_ms::bigint * interval '1 millisecond' END,
				lease_successor = NULL,
				lease_successor_until = NULL
			WHERE singleton AND lease_owner = @owner
			RETURNING lease_owner IS NOT NULL`,
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
// state either way.
func (l leaseSQL) acquireLease(ctx context.Context, q store.Querier, owner string, d time.Duration, wait bool, successorTTL time.Duration) (State, bool, error) {
	var took bool
	st, err := scanState(q.QueryRow(ctx, l.acquire, pgx.NamedArgs{
		"owner":        owner,
		"lease_ms":     d.Milliseconds(),
		"wait":         wait,
		"successor_ms": successorTTL.Milliseconds(),
	}), &took)
	if errors.Is(err, pgx.ErrNoRows) {
		return State{}, false, errors.New("fill: fill_state has no row: run the migrations")
	}
	if err != nil {
		return State{}, false, fmt.Errorf("take fill lease: %w", err)
	}
	return st, took, nil
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

// finishPass writes st and hands the lease to a live successor (renewed
// for d) or releases it; it reports whether it handed over.
func (l leaseSQL) finishPass(ctx context.Context, q store.Querier, owner string, st State, d time.Duration) (bool, error) {
	args := stateArgs(st)
	args["owner"], args["lease_ms"] = owner, d.Milliseconds()
	var handed bool
	err := q.QueryRow(ctx, l.finish, args).Scan(&handed)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, errLeaseLost
	}
	if err != nil {
		return false, fmt.Errorf("release fill lease: %w", err)
	}
	return handed, nil
}

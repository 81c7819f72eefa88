package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// relay drives the delivery outbox as an application's relay would: claim
// pending rows (FOR UPDATE SKIP LOCKED, in a short transaction), mark them
// delivered, push, ack. Some acks are lost on purpose, as when the relay
// crashes between the push and the ack: those rows stay delivered until
// the sweep function puts them back to pending and the relay tries again.
type relay struct {
	ob   *outbox.Outbox
	pool *pgxpool.Pool
	l    *ledger
	rng  *rand.Rand
	// lossPct is the share of acks lost; set to 0 for the drain, so the
	// demo settles within a bounded time.
	lossPct atomic.Int32
}

func (r *relay) run(ctx context.Context) {
	for ctx.Err() == nil {
		n, err := r.once(ctx)
		if err != nil && ctx.Err() == nil {
			r.l.fail("relay", err)
		}
		if n == 0 {
			_ = pass.Sleep(ctx, 100*time.Millisecond)
		}
	}
}

func (r *relay) once(ctx context.Context) (int, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after Commit
	claimed, err := r.ob.ClaimPending(ctx, tx, 50)
	if err != nil {
		return 0, err
	}
	for _, d := range claimed {
		if err := r.ob.MarkDelivered(ctx, tx, d.ID); err != nil {
			return 0, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	for _, d := range claimed {
		// The push to the recipient would happen here.
		if r.rng.IntN(100) < int(r.lossPct.Load()) {
			r.l.lostAcks.Add(1)
			continue
		}
		if err := r.ob.Ack(ctx, nil, d.ID); err != nil {
			if errors.Is(err, outbox.ErrLostRace) {
				// The sweep reset it first: it comes back like a lost ack.
				r.l.lostAcks.Add(1)
				continue
			}
			return len(claimed), err
		}
	}
	return len(claimed), nil
}

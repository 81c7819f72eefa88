package main

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// Errors the workload returns on purpose to make InTx roll back.
var (
	errRollback  = errors.New("demo: business rule said no")
	errSavepoint = errors.New("demo: optional step failed")
	errHeld      = errors.New("demo: long transaction gave up")
)

// writer is one publisher goroutine's view of the world.
type writer struct {
	id   int
	ob   *outbox.Outbox
	pool *pgxpool.Pool
	l    *ledger
	rng  *rand.Rand
	n    int
}

// The mix of what a publisher does, in percent. Commits dominate, as in a
// real application; every kind of abandoned sequence is common enough to
// show up within a few seconds.
const (
	pctCommit     = 70
	pctReported   = 12 // InTx rolls back and reports the sequences
	pctCrashed    = 8  // plain Publish, Rollback, no report: a crashed writer
	pctSavepoints = 10 // a savepoint rolls back inside a committed transaction
)

// run publishes until stop is closed. DB calls use a context that is never
// cancelled mid-commit: a COMMIT cut short would leave the writer not
// knowing whether its events exist, and the verdict could not judge them.
func (w *writer) run(stop <-chan struct{}) {
	ctx := context.Background()
	for {
		select {
		case <-stop:
			return
		case <-time.After(time.Duration(5+w.rng.IntN(25)) * time.Millisecond):
		}
		switch p := w.rng.IntN(100); {
		case p < pctCommit:
			w.commit(ctx)
		case p < pctCommit+pctReported:
			w.rollbackReported(ctx)
		case p < pctCommit+pctReported+pctCrashed:
			w.crash(ctx)
		default:
			w.savepoint(ctx)
		}
	}
}

func (w *writer) payloads() []any {
	k := 1 + w.rng.IntN(3)
	out := make([]any, k)
	for i := range out {
		w.n++
		out[i] = map[string]int{"publisher": w.id, "n": w.n}
	}
	return out
}

// commit publishes a few events and enqueues a delivery in one transaction.
func (w *writer) commit(ctx context.Context) {
	var seqs []int64
	err := w.ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		var err error
		if seqs, err = tx.Publish(ctx, "demo.order", w.payloads()...); err != nil {
			return err
		}
		return w.enqueue(ctx, tx, seqs)
	})
	w.committed("commit", seqs, err)
}

// committed records a transaction that published seqs and enqueued a
// delivery of them, or, on err, its failure as what; it says which.
func (w *writer) committed(what string, seqs []int64, err error) bool {
	if err != nil {
		w.l.fail(what, err)
		return false
	}
	w.l.commit(seqs)
	w.l.enqueued.Add(1)
	return true
}

func (w *writer) enqueue(ctx context.Context, tx *outbox.Tx, seqs []int64) error {
	body, _ := json.Marshal(map[string]any{"sequences": seqs})
	// Half to the webhook, half to the queue (deliver.go).
	recipient := recipientWebhook
	if seqs[0]%2 == 0 {
		recipient = recipientQueue
	}
	_, err := w.ob.Enqueue(ctx, tx.Tx, outbox.NewDelivery{Recipient: recipient, Kind: "order.created", Payload: body})
	return err
}

// rollbackReported: InTx rolls back and sends a rollback report.
func (w *writer) rollbackReported(ctx context.Context) {
	var seqs []int64
	var at time.Time
	err := w.ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		var err error
		if seqs, err = tx.Publish(ctx, "demo.order", w.payloads()...); err != nil {
			return err
		}
		// The rollback follows this return at once; the report after it.
		at = time.Now()
		return errRollback
	})
	// A failed report is joined to errRollback; the reporter (see
	// reporter.go) has already counted it.
	if !errors.Is(err, errRollback) {
		w.l.fail("reported rollback", err)
		return
	}
	w.l.abandon(seqs, at, true, "rollback")
}

// crash: a writer that dies after publishing; nobody reports anything, so
// only the fill function's proof can release the consumer.
func (w *writer) crash(ctx context.Context) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		w.l.fail("crashed writer: begin", err)
		return
	}
	seqs, err := w.ob.Publish(ctx, tx, "demo.order", w.payloads()...)
	_ = tx.Rollback(ctx)
	if err != nil {
		w.l.fail("crashed writer: publish", err)
		return
	}
	w.l.abandon(seqs, time.Now(), false, "crash")
}

// savepoint commits some events while a savepoint inside the same
// transaction rolls back others; InTx reports those after the commit.
func (w *writer) savepoint(ctx context.Context) {
	var kept, lost []int64
	var at time.Time
	err := w.ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
		var err error
		if kept, err = tx.Publish(ctx, "demo.order", w.payloads()...); err != nil {
			return err
		}
		if err := tx.Savepoint(ctx, func(ctx context.Context, sp *outbox.Tx) error {
			var err error
			if lost, err = sp.Publish(ctx, "demo.order.extra", w.payloads()...); err != nil {
				return err
			}
			return errSavepoint
		}); !errors.Is(err, errSavepoint) {
			return err
		}
		at = time.Now()
		return w.enqueue(ctx, tx, kept)
	})
	if w.committed("savepoint", kept, err) {
		w.l.abandon(lost, at, true, "savepoint")
	}
}

// holder opens a transaction, publishes, holds it for `hold`, and rolls
// back: the consumer stalls behind it, and the fill function's proof is
// blocked until it ends (its xid holds the horizon back). Every other hold
// crashes without a report, so both paths meet a long writer.
func holder(ob *outbox.Outbox, pool *pgxpool.Pool, l *ledger, hold, every time.Duration, stop <-chan struct{}) {
	ctx := context.Background()
	wait := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	if !wait(2 * time.Second) { // let the consumer get going first
		return
	}
	for i := 0; ; i++ {
		begin := time.Now()
		if i%2 == 0 {
			var seqs []int64
			var at time.Time
			err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
				var err error
				if seqs, err = tx.Publish(ctx, "demo.batch", map[string]string{"held": "yes"}); err != nil {
					return err
				}
				wait(hold)
				at = time.Now()
				return errHeld
			})
			if errors.Is(err, errHeld) {
				l.abandon(seqs, at, true, "held")
				l.hold(begin, at)
			} else {
				l.fail("held transaction", err)
			}
		} else {
			tx, err := pool.Begin(ctx)
			if err != nil {
				l.fail("held transaction: begin", err)
			} else {
				seqs, err := ob.Publish(ctx, tx, "demo.batch", map[string]string{"held": "crashed"})
				wait(hold)
				_ = tx.Rollback(ctx)
				end := time.Now()
				l.hold(begin, end)
				if err != nil {
					l.fail("held transaction: publish", err)
				} else {
					l.abandon(seqs, end, false, "held-crash")
				}
			}
		}
		if !wait(every) {
			return
		}
	}
}

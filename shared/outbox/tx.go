package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// Tx is a transaction run by InTx. It records the sequences it allocates so
// that, if it does not commit, they can be reported at once instead of
// waiting for the fill function's grace and proof.
type Tx struct {
	pgx.Tx
	o     *Outbox
	state *txState
	// mine are the sequences allocated at this level (the top level or one
	// savepoint); they move to state.abandoned if this level rolls back.
	mine []int64
}

type txState struct {
	xid       uint64
	hasXID    bool
	abandoned []int64 // rolled back with a savepoint, inside a tx that may commit
}

// Publish is Outbox.Publish, remembered for a rollback report.
func (t *Tx) Publish(ctx context.Context, topic string, payloads ...any) ([]int64, error) {
	seqs, xid, err := t.o.publish(ctx, t.Tx, topic, payloads)
	if err != nil {
		return nil, err
	}
	t.state.xid, t.state.hasXID = xid, true
	t.mine = append(t.mine, seqs...)
	return seqs, nil
}

// Savepoint runs fn inside a savepoint. When fn fails (or panics) the
// savepoint rolls back and the sequences published inside it are abandoned
// even if the outer transaction commits; they are reported after it ends.
func (t *Tx) Savepoint(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) (err error) {
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: savepoint: %w", err)
	}
	child := &Tx{Tx: sp, o: t.o, state: t.state}
	defer func() {
		if p := recover(); p != nil {
			_ = sp.Rollback(ctx)
			t.state.abandoned = append(t.state.abandoned, child.mine...)
			panic(p)
		}
	}()
	if err := fn(ctx, child); err != nil {
		if rbErr := sp.Rollback(ctx); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("outbox: rollback savepoint: %w", rbErr))
		}
		t.state.abandoned = append(t.state.abandoned, child.mine...)
		return err
	}
	if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
		t.state.abandoned = append(t.state.abandoned, child.mine...)
		return fmt.Errorf("outbox: release savepoint: %w", err)
	}
	t.mine = append(t.mine, child.mine...)
	return nil
}

// reportTimeout bounds a rollback report: it runs after the caller's
// context may already be done (a cancelled context is a common reason for
// the rollback), so it gets its own short deadline.
const reportTimeout = 5 * time.Second

// InTx runs fn in a transaction and commits it when fn returns nil.
//
// When the transaction does not commit after sequences were allocated — fn
// returned an error, fn panicked, or COMMIT failed — those sequences are
// reported with the transaction's xid. A failed report never hides the
// original error: it is joined to it (errors.Is still finds the original),
// or logged when a panic is being re-raised. After a successful commit
// (savepoint rollbacks to report) InTx returns nil whatever the report
// did: an error would say "not committed". A COMMIT that failed may in
// truth have committed (a dropped connection); reporting is still safe,
// because the compensate function checks the xid's status and never writes
// over a row that exists.
func (o *Outbox) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) (err error) {
	ptx, err := o.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	tx := &Tx{Tx: ptx, o: o, state: &txState{}}
	committed := false
	defer func() {
		p := recover()
		if p == nil && committed {
			// Savepoint rollbacks inside a committed transaction: the xid
			// is committed, so compensate fills exactly what is missing.
			// A failed report is only logged: returning it would make a
			// committed transaction look failed, and a caller that retries
			// on error would publish everything again. Nothing is lost —
			// the fill function proves and fills the gap after its grace.
			if rerr := o.report(tx.state, tx.state.abandoned); rerr != nil {
				o.log.Warn("outbox: rollback report failed after commit; the fill function will fill the gap", "error", rerr)
			}
			return
		}
		if !committed {
			_ = ptx.Rollback(context.WithoutCancel(ctx))
		}
		rerr := o.report(tx.state, append(slices.Clone(tx.mine), tx.state.abandoned...))
		if p != nil {
			if rerr != nil {
				o.log.Error("outbox: rollback report failed while a panic unwinds", "error", rerr)
			}
			panic(p)
		}
		err = errors.Join(err, rerr)
	}()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	if err := ptx.Commit(ctx); err != nil {
		return fmt.Errorf("outbox: commit: %w", err)
	}
	committed = true
	return nil
}

// report sends one rollback report; nil when there is nothing to report or
// no reporter.
func (o *Outbox) report(state *txState, sequences []int64) error {
	if len(sequences) == 0 || o.reporter == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	r := report.Report{XID: state.xid, HasXID: state.hasXID, Sequences: slices.Sorted(slices.Values(sequences))}
	if err := o.reporter.Report(ctx, r); err != nil {
		return fmt.Errorf("outbox: report rollback of %d sequences: %w", len(sequences), err)
	}
	return nil
}

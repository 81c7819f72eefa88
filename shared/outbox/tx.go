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

// Tx is a transaction whose published sequences are tracked: one run by
// InTx, or one the application began itself and handed to Wrap. If it
// does not commit, its sequences are reported at once (with its xid)
// instead of waiting for the fill function's grace and proof. SQLTx is the
// same on database/sql.
type Tx struct {
	pgx.Tx
	t tracker
}

// tracker is a tracked transaction's bookkeeping, whichever library runs
// it: the sequences each level published, the xid, what savepoints
// abandoned, and the report when it does not commit.
type tracker struct {
	c     *core
	state *txState
	// mine are the sequences allocated at this level (the top level or one
	// savepoint); they move to state.abandoned if this level rolls back.
	mine []int64
	// savepoint: this is the transaction a Savepoint function is handed;
	// it ends when that function returns, not by Commit or Rollback.
	savepoint bool
}

type txState struct {
	xid       uint64
	hasXID    bool
	abandoned []int64 // rolled back with a savepoint, inside a tx that may commit
	ended     bool    // Commit or Rollback ran: nothing more to report
	depth     int     // savepoints open (database/sql names them by depth)
}

// Wrap tracks a transaction the application began itself (with its own
// options, through its own pool or connection): publish with the returned
// Tx, then end it with its Commit or Rollback, which report what did not
// commit exactly as InTx does. XID says the transaction's id once
// something was published, for an application that reports by itself.
//
//	pgxTx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable})
//	tx := ob.Wrap(pgxTx)
//	defer tx.Rollback(ctx) // a no-op after Commit
//	seqs, err := tx.Publish(ctx, "order.placed", order)
//	...
//	return tx.Commit(ctx)
func (o *Outbox) Wrap(tx pgx.Tx) *Tx {
	return &Tx{Tx: tx, t: tracker{c: &o.core, state: &txState{}}}
}

// XID is the transaction's id (pg_current_xact_id()) and true once Publish
// has run in it; a rollback report carries it (docs/design.md §3.4).
func (t *Tx) XID() (uint64, bool) { return t.t.state.xid, t.t.state.hasXID }

// Sequences are the sequences published in this transaction that are
// still meant to commit (not rolled back with a savepoint), in order.
func (t *Tx) Sequences() []int64 { return slices.Clone(t.t.mine) }

// errSavepointEnds: a savepoint's Tx is ended by its Savepoint function.
var errSavepointEnds = errors.New("outbox: a savepoint ends when its Savepoint function returns")

// Commit commits the transaction. If COMMIT fails, every sequence it
// published is reported, and the report's failure (if any) is joined to
// the error. After a successful commit, sequences rolled back with a
// savepoint are reported; a failure of that report is only logged (an
// error would say "not committed"). Calling Commit or Rollback again
// returns pgx.ErrTxClosed and reports nothing.
func (t *Tx) Commit(ctx context.Context) error {
	return t.t.commit(pgx.ErrTxClosed, func() error { return t.Tx.Commit(ctx) })
}

// Rollback rolls the transaction back and reports every sequence it
// published; the report's failure is joined to the rollback's error. After
// Commit it is a no-op returning pgx.ErrTxClosed, as pgx's is, so `defer
// tx.Rollback(ctx)` is safe.
func (t *Tx) Rollback(ctx context.Context) error {
	return t.t.rollback(pgx.ErrTxClosed, func() error { return t.Tx.Rollback(context.WithoutCancel(ctx)) })
}

// Publish is Outbox.Publish, remembered for a rollback report.
func (t *Tx) Publish(ctx context.Context, topic string, payloads ...any) ([]int64, error) {
	return t.t.publish(ctx, pgxExecutor{t.Tx}, topic, payloads)
}

// Savepoint runs fn inside a savepoint. When fn fails (or panics) the
// savepoint rolls back and the sequences published inside it are abandoned
// even if the outer transaction commits; they are reported after it ends.
func (t *Tx) Savepoint(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) (err error) {
	sp, err := t.Tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("outbox: savepoint: %w", err)
	}
	child := &Tx{Tx: sp, t: t.t.child()}
	return t.t.inSavepoint(&child.t,
		func() error { return fn(ctx, child) },
		func() error { return sp.Rollback(ctx) },
		func() error { return sp.Commit(ctx) }) // RELEASE SAVEPOINT
}

// end marks the transaction ended, or says why it cannot end it: a
// savepoint's Tx ends with its callback, and an ended transaction answers
// closed, the library's error for it.
func (t *tracker) end(closed error) error {
	if t.savepoint {
		return errSavepointEnds
	}
	if t.state.ended {
		return closed
	}
	t.state.ended = true
	return nil
}

// commit ends the transaction with do (COMMIT) and reports: everything
// when COMMIT failed, what savepoints abandoned when it succeeded. closed
// is the library's answer to a transaction already ended.
func (t *tracker) commit(closed error, do func() error) error {
	if err := t.end(closed); err != nil {
		return err
	}
	if err := do(); err != nil {
		return errors.Join(fmt.Errorf("outbox: commit: %w", err), t.reportAbandoned(true))
	}
	// The xid is committed, so compensate fills exactly what is missing.
	// Nothing is lost if the report fails: the fill function proves and
	// fills the gap after its grace.
	if rerr := t.reportAbandoned(false); rerr != nil {
		t.c.log.Warn("outbox: rollback report failed after commit; the fill function will fill the gap", "error", rerr)
	}
	return nil
}

// rollback ends the transaction with do (ROLLBACK) and reports everything
// it published.
func (t *tracker) rollback(closed error, do func() error) error {
	if err := t.end(closed); err != nil {
		return err
	}
	err := do()
	if err != nil {
		err = fmt.Errorf("outbox: rollback: %w", err)
	}
	return errors.Join(err, t.reportAbandoned(true))
}

// reportAbandoned reports the savepoint-abandoned sequences, and with all
// the ones this level published too.
func (t *tracker) reportAbandoned(all bool) error {
	seqs := t.state.abandoned
	if all {
		seqs = append(slices.Clone(t.mine), seqs...)
	}
	return t.c.report(t.state, seqs)
}

// publish runs Publish in the transaction ex and remembers what it
// allocated and the xid.
func (t *tracker) publish(ctx context.Context, ex executor, topic string, payloads []any) ([]int64, error) {
	seqs, xid, err := t.c.publish(ctx, ex, topic, payloads)
	if err != nil {
		return nil, err
	}
	t.state.xid, t.state.hasXID = xid, true
	t.mine = append(t.mine, seqs...)
	return seqs, nil
}

// child is the bookkeeping of a savepoint inside t.
func (t *tracker) child() tracker { return tracker{c: t.c, state: t.state, savepoint: true} }

// inSavepoint runs fn in the savepoint child: when fn fails or panics it
// rolls the savepoint back (its sequences abandoned, to be reported once
// the transaction ends), else releases it (its sequences now t's).
func (t *tracker) inSavepoint(child *tracker, fn, rollback, release func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			_ = rollback()
			t.state.abandoned = append(t.state.abandoned, child.mine...)
			panic(p)
		}
	}()
	if err := fn(); err != nil {
		if rbErr := rollback(); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("outbox: rollback savepoint: %w", rbErr))
		}
		t.state.abandoned = append(t.state.abandoned, child.mine...)
		return err
	}
	if err := release(); err != nil {
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

// InTx runs fn in a transaction and commits it when fn returns nil. opts,
// at most one, are the transaction's options (isolation level, read
// only, deferrable), as pgx's BeginTx takes them.
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
func (o *Outbox) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error, opts ...pgx.TxOptions) (err error) {
	txOpts, err := atMostOne(opts, "pgx.TxOptions")
	if err != nil {
		return err
	}
	ptx, err := o.db.BeginTx(ctx, txOpts)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	tx := o.Wrap(ptx)
	return o.runTx(pgx.ErrTxClosed, func() error { return fn(ctx, tx) },
		func() error { return tx.Rollback(ctx) }, func() error { return tx.Commit(ctx) })
}

// atMostOne is InTx's options, what for the error: the zero value when
// none is given, the one given, or an error for more than one.
func atMostOne[T any](opts []T, what string) (T, error) {
	var zero T
	switch len(opts) {
	case 0:
		return zero, nil
	case 1:
		return opts[0], nil
	}
	return zero, fmt.Errorf("outbox: InTx takes at most one %s", what)
}

// runTx is InTx for both libraries: fn, then commit, or rollback when fn
// fails or panics (closed is the library's "already ended").
func (c *core) runTx(closed error, fn, rollback, commit func() error) error {
	defer func() {
		if p := recover(); p != nil {
			if rerr := rollback(); rerr != nil {
				c.log.Error("outbox: rollback report failed while a panic unwinds", "error", rerr)
			}
			panic(p)
		}
	}()
	if err := fn(); err != nil {
		if rerr := rollback(); rerr != nil && !errors.Is(rerr, closed) {
			return errors.Join(err, rerr)
		}
		return err
	}
	return commit()
}

// report sends one rollback report; nil when there is nothing to report or
// no reporter.
func (c *core) report(state *txState, sequences []int64) error {
	if len(sequences) == 0 || c.reporter == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), reportTimeout)
	defer cancel()
	r := report.Report{XID: state.xid, HasXID: state.hasXID, Sequences: slices.Sorted(slices.Values(sequences))}
	if err := c.reporter.Report(ctx, r); err != nil {
		return fmt.Errorf("outbox: report rollback of %d sequences: %w", len(sequences), err)
	}
	return nil
}

package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
)

// SQLOutbox is the library on database/sql, with any PostgreSQL driver
// (pgx's stdlib, lib/pq): the Outbox's methods with *sql.Tx where the
// Outbox takes a pgx.Tx, and the same statements, rules and reports.
// Safe for concurrent use.
//
//	db, _ := sql.Open("pgx", url) // import _ "github.com/jackc/pgx/v5/stdlib"
//	ob, _ := outbox.NewSQL(db, outbox.Options{Reporter: reporter})
//	err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.SQLTx) error {
//		if _, err := tx.ExecContext(ctx, `UPDATE orders SET ...`); err != nil {
//			return err
//		}
//		_, err := tx.Publish(ctx, "order.placed", order)
//		return err
//	})
type SQLOutbox struct {
	core
	db *sql.DB
}

// NewSQL validates the options.
func NewSQL(db *sql.DB, opts Options) (*SQLOutbox, error) {
	if db == nil {
		return nil, errors.New("outbox: nil *sql.DB")
	}
	cache := &positionalCache{}
	c, err := newCore(opts, sqlExecutor{q: db, cache: cache})
	if err != nil {
		return nil, err
	}
	return &SQLOutbox{core: c, db: db}, nil
}

// executor runs statements in q, with the Outbox's cache of their
// positional forms.
func (o *SQLOutbox) executor(q sqlQuerier) executor {
	return sqlExecutor{q: q, cache: o.pool.(sqlExecutor).cache}
}

// sqlOr is tx, or the SQLOutbox's own DB when tx is nil.
func (o *SQLOutbox) sqlOr(tx *sql.Tx) executor {
	if tx == nil {
		return o.pool
	}
	return o.executor(tx)
}

// Publish is Outbox.Publish in a database/sql transaction.
func (o *SQLOutbox) Publish(ctx context.Context, tx *sql.Tx, topic string, payloads ...any) ([]int64, error) {
	if tx == nil {
		return nil, errNoTx
	}
	seqs, _, err := o.publish(ctx, o.executor(tx), topic, payloads)
	return seqs, err
}

// ReadContiguous is Outbox.ReadContiguous.
func (o *SQLOutbox) ReadContiguous(ctx context.Context, after int64, limit int) ([]Event, error) {
	return o.readContiguous(ctx, after, limit)
}

// Head is Outbox.Head.
func (o *SQLOutbox) Head(ctx context.Context) (int64, error) { return o.head(ctx) }

// Consume is Outbox.Consume. Listen, when set, still dials a pgx
// connection of its own: database/sql has no notifications.
func (o *SQLOutbox) Consume(ctx context.Context, opts ConsumerOptions, handle func(ctx context.Context, events []Event) error) error {
	return o.consume(ctx, opts, handle)
}

// Enqueue is Outbox.Enqueue; a nil tx uses the SQLOutbox's DB.
func (o *SQLOutbox) Enqueue(ctx context.Context, tx *sql.Tx, d NewDelivery) (int64, error) {
	return o.enqueue(ctx, o.sqlOr(tx), d)
}

// ClaimPending is Outbox.ClaimPending.
func (o *SQLOutbox) ClaimPending(ctx context.Context, tx *sql.Tx, limit int) ([]Delivery, error) {
	if tx == nil {
		return nil, errors.New("outbox: ClaimPending needs a transaction to hold its row locks")
	}
	return o.claimPending(ctx, o.executor(tx), limit)
}

// MarkDelivered is Outbox.MarkDelivered.
func (o *SQLOutbox) MarkDelivered(ctx context.Context, tx *sql.Tx, id int64) error {
	return o.move(ctx, o.sqlOr(tx), o.sql.markDelivered, id)
}

// Ack is Outbox.Ack.
func (o *SQLOutbox) Ack(ctx context.Context, tx *sql.Tx, id int64) error {
	return o.move(ctx, o.sqlOr(tx), o.sql.ack, id)
}

// SQLTx is Tx on database/sql: the application's *sql.Tx (its methods are
// the transaction's), with the sequences it published tracked and
// reported when it does not commit.
type SQLTx struct {
	*sql.Tx
	o *SQLOutbox
	t tracker
}

// Wrap tracks a transaction the application began itself, as
// Outbox.Wrap does:
//
//	sqlTx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
//	tx := ob.Wrap(sqlTx)
//	defer tx.Rollback() // reports what it published; sql.ErrTxDone after Commit
//	seqs, err := tx.Publish(ctx, "order.placed", order)
//	...
//	return tx.Commit()
func (o *SQLOutbox) Wrap(tx *sql.Tx) *SQLTx {
	return &SQLTx{Tx: tx, o: o, t: tracker{c: &o.core, state: &txState{}}}
}

// InTx is Outbox.InTx on database/sql: opts, at most one, are the
// transaction's options as database/sql takes them.
func (o *SQLOutbox) InTx(ctx context.Context, fn func(ctx context.Context, tx *SQLTx) error, opts ...*sql.TxOptions) error {
	txOpts, err := atMostOne(opts, "*sql.TxOptions")
	if err != nil {
		return err
	}
	stx, err := o.db.BeginTx(ctx, txOpts)
	if err != nil {
		return fmt.Errorf("outbox: begin: %w", err)
	}
	tx := o.Wrap(stx)
	return o.runTx(sql.ErrTxDone, func() error { return fn(ctx, tx) }, tx.Rollback, tx.Commit)
}

// XID is Tx.XID.
func (t *SQLTx) XID() (uint64, bool) { return t.t.state.xid, t.t.state.hasXID }

// Sequences is Tx.Sequences.
func (t *SQLTx) Sequences() []int64 { return slices.Clone(t.t.mine) }

// Publish is SQLOutbox.Publish, remembered for a rollback report.
func (t *SQLTx) Publish(ctx context.Context, topic string, payloads ...any) ([]int64, error) {
	return t.t.publish(ctx, t.o.executor(t.Tx), topic, payloads)
}

// Commit is Tx.Commit: after a failed COMMIT everything published is
// reported, after a successful one what savepoints abandoned. Again, or
// after Rollback, it returns sql.ErrTxDone and reports nothing.
func (t *SQLTx) Commit() error { return t.t.commit(sql.ErrTxDone, t.Tx.Commit) }

// Rollback is Tx.Rollback: it reports everything published. After Commit
// it returns sql.ErrTxDone, so `defer tx.Rollback()` is safe.
func (t *SQLTx) Rollback() error { return t.t.rollback(sql.ErrTxDone, t.Tx.Rollback) }

// Savepoint is Tx.Savepoint: fn runs inside a savepoint (fn's tx is the
// same *sql.Tx, so every statement it sends is inside it), rolled back
// when fn fails or panics, its sequences then reported once the
// transaction ends.
func (t *SQLTx) Savepoint(ctx context.Context, fn func(ctx context.Context, tx *SQLTx) error) error {
	// database/sql has no savepoints: they are statements, named by depth.
	t.t.state.depth++
	name := fmt.Sprintf("outboxkeeper_%d", t.t.state.depth)
	defer func() { t.t.state.depth-- }()
	if _, err := t.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
		return fmt.Errorf("outbox: savepoint: %w", err)
	}
	child := &SQLTx{Tx: t.Tx, o: t.o, t: t.t.child()}
	return t.t.inSavepoint(&child.t,
		func() error { return fn(ctx, child) },
		func() error {
			_, err := t.ExecContext(context.WithoutCancel(ctx), "ROLLBACK TO SAVEPOINT "+name)
			return err
		},
		func() error {
			_, err := t.ExecContext(ctx, "RELEASE SAVEPOINT "+name)
			return err
		})
}

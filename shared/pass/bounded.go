package pass

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// Batcher sends a batch of statements in one round trip: a pool, a
// connection or a transaction.
type Batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// DB is what a pass runs on: plain statements, and batches for Bounded.
type DB interface {
	store.Querier
	Batcher
}

// ErrBudget is matched (errors.Is) by every *BudgetError.
var ErrBudget = errors.New("pass budget spent")

// ErrNotSent is matched by a *BudgetError for a statement that was never
// sent because no time was left: nothing waited, the pass simply ran out.
var ErrNotSent = errors.New("no time left to send the statement")

// BudgetError is a statement that ran out of its pass's budget: it never
// started, or the server cancelled it at the deadline (most often because
// it waited on a lock another session holds).
type BudgetError struct{ Err error }

func (e *BudgetError) Error() string {
	return "stopped at the end of the pass budget: " + e.Err.Error()
}
func (e *BudgetError) Unwrap() error        { return e.Err }
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// setTimeout is sent ahead of every bounded statement, in the same
// implicit transaction: set_config(..., true) is transaction-local, so
// the settings end with the statement and never reach the session (which
// a transaction pooler would hand to someone else, and which pins an RDS
// Proxy connection).
//
// It also pins search_path to pg_catalog, pg_temp: every name of ours is
// schema-qualified, and a built-in operator or function that needs an
// implicit cast (bigint * interval, text || bigint, unnest(bigint[])) loses
// to an exact-typed one planted in any schema on the login's search_path
// (public, on PostgreSQL 14 and older, is writable by everyone), which
// would then run with the functions' rights. pg_temp last: a temporary
// object cannot shadow anything either.
//
// And it turns JIT off: the planner compiles a statement whose estimated
// cost passes jit_above_cost, and the estimate grows with the table and
// with what the statistics say, not with the batch. A batch of ours runs
// for milliseconds; compiling one costs 10 ms to 0.3 s, a step nothing
// pays back.
const setTimeout = `SELECT set_config('statement_timeout', $1, true), set_config('search_path', 'pg_catalog, pg_temp', true), set_config('jit', 'off', true)`

// contextSlack is how much longer the client waits than the server's
// timeout: the server cancels first, with a clean error on a connection
// that stays usable, and the context only catches a server that does not
// answer at all.
const contextSlack = 300 * time.Millisecond

// Bounded is a Querier whose every statement ends by Deadline: it runs in
// an implicit transaction of its own (one round trip, a batch) whose first
// statement sets statement_timeout to the time left, under a context with
// the same deadline. A statement blocked on a lock therefore costs the
// pass what is left of its budget, never the invocation, and never keeps
// a snapshot (the xmin horizon the fill's proof waits on) past it.
//
// A statement sent after the deadline is not sent at all. Either way the
// error is a *BudgetError.
type Bounded struct {
	DB       Batcher
	Deadline time.Time
	// LockWait, when set, also bounds every lock wait (lock_timeout, set
	// the same transaction-local way): a statement that should never wait
	// on another session's row for long gives up after LockWait with
	// SQLSTATE 55P03 (IsLockTimeout) instead of spending the budget.
	LockWait time.Duration
	// Now is the clock the time left is measured with; time.Now by default.
	Now func() time.Time
}

// setLockTimeout rides beside setTimeout when Bounded.LockWait is set.
const setLockTimeout = `SELECT set_config('lock_timeout', $1, true)`

// IsLockTimeout says err is a lock wait that LockWait ended.
func IsLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

func (b *Bounded) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// send queues the timeout and the statement, and reads the timeout's
// result, leaving the statement's for the caller.
func (b *Bounded) send(ctx context.Context, sql string, args []any) (pgx.BatchResults, context.CancelFunc, error) {
	left := b.Deadline.Sub(b.now())
	if left <= 0 {
		return nil, nil, &BudgetError{Err: ErrNotSent}
	}
	cctx, cancel := context.WithDeadline(ctx, b.Deadline.Add(contextSlack))
	batch := &pgx.Batch{}
	batch.Queue(setTimeout, strconv.FormatInt(max(1, left.Milliseconds()), 10))
	if b.LockWait > 0 {
		batch.Queue(setLockTimeout, strconv.FormatInt(max(1, b.LockWait.Milliseconds()), 10))
	}
	batch.Queue(sql, args...)
	br := b.DB.SendBatch(cctx, batch)
	for range batch.Len() - 1 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			cancel()
			return nil, nil, b.classify(ctx, err)
		}
	}
	return br, cancel, nil
}

// classify turns a timeout of ours into a *BudgetError; anything else,
// including the caller's own context ending, is returned as it is.
func (b *Bounded) classify(ctx context.Context, err error) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "57014" && !b.now().Before(b.Deadline.Add(-50*time.Millisecond)) {
		// query_canceled at our deadline: our statement_timeout, not an
		// operator's pg_cancel_backend.
		return &BudgetError{Err: err}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return &BudgetError{Err: err}
	}
	return err
}

// Exec runs sql within the deadline.
func (b *Bounded) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	br, cancel, err := b.send(ctx, sql, args)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer cancel()
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, b.classify(ctx, err)
}

// QueryRow runs sql within the deadline; the statement's result is read
// by Scan.
func (b *Bounded) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	br, cancel, err := b.send(ctx, sql, args)
	if err != nil {
		return errRow{err}
	}
	return &boundedRow{b: b, ctx: ctx, br: br, cancel: cancel}
}

// Query runs sql within the deadline; the rows hold the connection until
// they are closed (or read to the end).
func (b *Bounded) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	br, cancel, err := b.send(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		cancel()
		return nil, b.classify(ctx, err)
	}
	return &boundedRows{Rows: rows, b: b, ctx: ctx, br: br, cancel: cancel}, nil
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type boundedRow struct {
	b      *Bounded
	ctx    context.Context
	br     pgx.BatchResults
	cancel context.CancelFunc
}

func (r *boundedRow) Scan(dest ...any) error {
	defer r.cancel()
	err := r.br.QueryRow().Scan(dest...)
	if cerr := r.br.Close(); err == nil {
		err = cerr
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return r.b.classify(r.ctx, err)
}

// boundedRows closes the batch with the rows, and when Next reaches the
// end, as pgx's own rows close themselves.
type boundedRows struct {
	pgx.Rows
	b      *Bounded
	ctx    context.Context
	br     pgx.BatchResults
	cancel context.CancelFunc
	done   bool
	err    error
}

func (r *boundedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *boundedRows) Close() {
	r.Rows.Close()
	if r.done {
		return
	}
	r.done = true
	r.err = r.br.Close()
	r.cancel()
}

func (r *boundedRows) Err() error {
	err := r.Rows.Err()
	if err == nil {
		err = r.err
	}
	return r.b.classify(r.ctx, err)
}

package pg

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// secretLogin is the user and password a secret-mode pool logs in with,
// re-read from Secrets Manager when the server refuses them: rotation
// changes the password in the database first and in the secret's
// AWSCURRENT version moments later, and a warm Lambda environment keeps
// the value it read at init for hours.
type secretLogin struct {
	client SecretsClient
	arn    string

	mu             sync.Mutex
	user, password string
	// generation counts the re-reads that changed the login, so a caller
	// whose login failed can tell whether another one already re-read it.
	generation int
	// rereads counts every re-read (tests).
	rereads int
}

// apply is the pool's BeforeConnect: each new connection takes the login
// as it is now. cc is pgxpool's per-connection copy.
func (l *secretLogin) apply(_ context.Context, cc *pgx.ConnConfig) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	cc.User, cc.Password = l.user, l.password
	return nil
}

func (l *secretLogin) current() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.generation
}

// refresh handles a login refused while the login was at generation seen:
// it reads the secret once, unless someone did since, and reports whether
// the login is now different, that is whether dialling again can help.
func (l *secretLogin) refresh(ctx context.Context, seen int) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.generation != seen {
		return true, nil
	}
	l.rereads++
	s, err := FetchSecret(ctx, l.client, l.arn)
	if err != nil {
		return false, err
	}
	if s.Username == l.user && s.Password == l.password {
		// The secret still holds the refused password (rotation has
		// changed the database but not yet the secret): nothing to retry
		// with. The next statement's login failure re-reads again.
		return false, nil
	}
	l.user, l.password = s.Username, s.Password
	l.generation++
	return true, nil
}

// invalidPassword is SQLSTATE 28P01, what the server answers a login
// with a wrong password (or, with IAM, an expired token).
func invalidPassword(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "28P01"
}

// Pool is the functions' connection pool: a pgxpool.Pool that, in secret
// mode, re-reads the secret once when a new connection's login is refused
// with 28P01 and dials again, so a rotated password costs one
// GetSecretValue instead of a failed pass. Every statement method acquires
// its connection through Acquire for that; outside secret mode they are
// pgxpool's own. A login refused before any statement was sent is always
// safe to retry.
type Pool struct {
	*pgxpool.Pool
	login *secretLogin
}

// Acquire takes a connection from the pool, dialling one if needed.
func (p *Pool) Acquire(ctx context.Context) (*pgxpool.Conn, error) {
	if p.login == nil {
		return p.Pool.Acquire(ctx)
	}
	seen := p.login.current()
	c, err := p.Pool.Acquire(ctx)
	if err == nil || !invalidPassword(err) {
		return c, err
	}
	changed, rerr := p.login.refresh(ctx, seen)
	if rerr != nil {
		return nil, fmt.Errorf("%w (then re-reading the secret: %v)", err, rerr)
	}
	if !changed {
		return nil, err
	}
	return p.Pool.Acquire(ctx)
}

// Exec runs sql on a connection of the pool.
func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if p.login == nil {
		return p.Pool.Exec(ctx, sql, args...)
	}
	c, err := p.Acquire(ctx)
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	defer c.Release()
	return c.Exec(ctx, sql, args...)
}

// Query runs sql; the connection goes back to the pool when the rows are
// closed or read to the end.
func (p *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if p.login == nil {
		return p.Pool.Query(ctx, sql, args...)
	}
	c, err := p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, sql, args...)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &releasingRows{Rows: rows, conn: c}, nil
}

// QueryRow runs sql; the connection goes back to the pool after Scan.
func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if p.login == nil {
		return p.Pool.QueryRow(ctx, sql, args...)
	}
	c, err := p.Acquire(ctx)
	if err != nil {
		return errRow{err}
	}
	return &releasingRow{row: c.QueryRow(ctx, sql, args...), conn: c}
}

// SendBatch sends b; the connection goes back to the pool when the
// results are closed.
func (p *Pool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if p.login == nil {
		return p.Pool.SendBatch(ctx, b)
	}
	c, err := p.Acquire(ctx)
	if err != nil {
		return errBatch{err}
	}
	br := c.SendBatch(ctx, b)
	if tx := br.Tx(); tx != nil {
		// A batch that began a transaction (Batch.BeginTx) keeps the
		// connection until that transaction ends, not until Close.
		return &txBatch{BatchResults: br, tx: &releasingTx{Tx: tx, conn: c}}
	}
	return &releasingBatch{BatchResults: br, conn: c}
}

// Begin starts a transaction; its connection goes back to the pool at
// Commit or Rollback.
func (p *Pool) Begin(ctx context.Context) (pgx.Tx, error) {
	return p.BeginTx(ctx, pgx.TxOptions{})
}

// BeginTx is Begin with options.
func (p *Pool) BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if p.login == nil {
		return p.Pool.BeginTx(ctx, opts)
	}
	c, err := p.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := c.BeginTx(ctx, opts)
	if err != nil {
		c.Release()
		return nil, err
	}
	return &releasingTx{Tx: tx, conn: c}, nil
}

// Ping checks that the database answers (dialling if needed).
func (p *Pool) Ping(ctx context.Context) error {
	c, err := p.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	return c.Ping(ctx)
}

// The wrappers below give an acquired connection back to the pool exactly
// once, when the caller is done with what it got, as pgxpool's own do.

type releasingRows struct {
	pgx.Rows
	conn *pgxpool.Conn
	once sync.Once
}

func (r *releasingRows) release() { r.once.Do(r.conn.Release) }

func (r *releasingRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Rows.Close()
	r.release()
	return false
}

func (r *releasingRows) Close() {
	r.Rows.Close()
	r.release()
}

type releasingRow struct {
	row  pgx.Row
	conn *pgxpool.Conn
}

func (r *releasingRow) Scan(dest ...any) error {
	defer r.conn.Release()
	return r.row.Scan(dest...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type releasingBatch struct {
	pgx.BatchResults
	conn *pgxpool.Conn
	once sync.Once
}

func (b *releasingBatch) Close() error {
	err := b.BatchResults.Close()
	b.once.Do(b.conn.Release)
	return err
}

type txBatch struct {
	pgx.BatchResults
	tx *releasingTx
}

func (b *txBatch) Tx() pgx.Tx { return b.tx }

type errBatch struct{ err error }

func (b errBatch) Tx() pgx.Tx                       { return nil }
func (b errBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b errBatch) Query() (pgx.Rows, error)         { return nil, b.err }
func (b errBatch) QueryRow() pgx.Row                { return errRow(b) }
func (b errBatch) Close() error                     { return b.err }

type releasingTx struct {
	pgx.Tx
	conn *pgxpool.Conn
	once sync.Once
}

func (t *releasingTx) Commit(ctx context.Context) error {
	err := t.Tx.Commit(ctx)
	t.once.Do(t.conn.Release)
	return err
}

func (t *releasingTx) Rollback(ctx context.Context) error {
	err := t.Tx.Rollback(ctx)
	t.once.Do(t.conn.Release)
	return err
}

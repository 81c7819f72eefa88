package testdb

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is a pool, a connection or a transaction: whatever a test sends
// a statement through.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Exec runs a statement a test needs to succeed, failing the test with the
// statement when it does not.
func Exec(t testing.TB, q Querier, sql string, args ...any) pgconn.CommandTag {
	t.Helper()
	tag, err := q.Exec(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag
}

// Scalar reads the one value a statement returns.
func Scalar[T any](t testing.TB, q Querier, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// Column reads the one column a statement returns, every row of it.
func Column[T any](t testing.TB, q Querier, sql string, args ...any) []T {
	t.Helper()
	rows, err := q.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[T])
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// Map reads the two columns a statement returns, every row of it, as
// first column -> second.
func Map[K comparable, V any](t testing.TB, q Querier, sql string, args ...any) map[K]V {
	t.Helper()
	rows, err := q.Query(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	out := map[K]V{}
	var k K
	var v V
	if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

// Exec runs a statement on the database's pool (see the package's Exec).
func (d *DB) Exec(t testing.TB, sql string, args ...any) pgconn.CommandTag {
	t.Helper()
	return Exec(t, d.Pool, sql, args...)
}

// NopDB is a pass.DB for tests that only build a Service: it panics if
// anything is sent through it.
type NopDB struct{}

func (NopDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	panic("testdb.NopDB: not queried")
}
func (NopDB) Query(context.Context, string, ...any) (pgx.Rows, error) {
	panic("testdb.NopDB: not queried")
}
func (NopDB) QueryRow(context.Context, string, ...any) pgx.Row { panic("testdb.NopDB: not queried") }
func (NopDB) SendBatch(context.Context, *pgx.Batch) pgx.BatchResults {
	panic("testdb.NopDB: not queried")
}

// Hold runs sql in a transaction on a connection of its own and keeps the
// transaction open until the test ends: a session holding a lock or an
// xid that the code under test must meet.
func (d *DB) Hold(t testing.TB, sql string) {
	t.Helper()
	tx, err := d.Connect(t).Begin(context.Background())
	if err != nil {
		t.Fatalf("testdb: hold: %v", err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck
	if _, err := tx.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

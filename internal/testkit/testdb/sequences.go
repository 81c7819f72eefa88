package testdb

import (
	"context"
	"testing"
)

// Burn plays a writer that publishes n events and rolls back, leaving n
// allocated sequences that will never be written: the gaps the fill
// exists for.
func (d *DB) Burn(t testing.TB, n int) (first, last int64) {
	t.Helper()
	ctx := context.Background()
	tx, err := d.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a no-op after the checked rollback
	err = tx.QueryRow(ctx,
		`SELECT min(s), max(s) FROM outbox.publish_batch('t', array_fill('{"burned":true}'::jsonb, ARRAY[$1::int])) AS s`, n).Scan(&first, &last)
	if err != nil {
		t.Fatalf("burn %d: %v", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("burn %d: rollback: %v", n, err)
	}
	return first, last
}

// BurnOne is Burn of one sequence, which it returns.
func (d *DB) BurnOne(t testing.TB) int64 {
	t.Helper()
	seq, _ := d.Burn(t, 1)
	return seq
}

// Span is the sequences lo to hi, both included (none when hi < lo).
func Span(lo, hi int64) []int64 {
	var s []int64
	for i := lo; i <= hi; i++ {
		s = append(s, i)
	}
	return s
}

// ReadEvents is read_events(after, max) called as any language calls it:
// the sequences a consumer at after may take now.
func (d *DB) ReadEvents(t testing.TB, after int64, max int) []int64 {
	t.Helper()
	return Column[int64](t, d.Pool, `SELECT sequence FROM outbox.read_events($1, $2)`, after, max)
}

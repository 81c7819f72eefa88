package migrations_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

func TestApplyTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	all, err := migrate.Load("second_outbox")
	if err != nil {
		t.Fatal(err)
	}

	first, err := migrate.Apply(ctx, db.Pool, "second_outbox")
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Applied) != len(all) || len(first.Skipped) != 0 {
		t.Fatalf("first run: %+v, want all %d applied", first, len(all))
	}
	second, err := migrate.Apply(ctx, db.Pool, "second_outbox")
	if err != nil {
		t.Fatal(err)
	}
	if len(second.Applied) != 0 || len(second.Skipped) != len(all) {
		t.Fatalf("second run: %+v, want nothing applied", second)
	}
	var recorded int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM second_outbox.schema_migrations`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded != len(all) {
		t.Fatalf("recorded %d migrations, want %d", recorded, len(all))
	}
	// The schema is really there and usable.
	var seq int64
	if err := db.Pool.QueryRow(ctx, `SELECT second_outbox.publish('t', '{}')`).Scan(&seq); err != nil || seq != 1 {
		t.Fatalf("publish in migrated schema: %d %v", seq, err)
	}
	// §2's signature, by name, headers included.
	var headers string
	if err := db.Pool.QueryRow(ctx, `SELECT second_outbox.publish(topic => 't', payload => '{}', headers => '{"h":1}')`).Scan(&seq); err != nil || seq != 2 {
		t.Fatalf("publish by named arguments: %d %v", seq, err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT headers::text FROM second_outbox.events WHERE sequence = 2`).Scan(&headers); err != nil || headers != `{"h": 1}` {
		t.Fatalf("headers %q, %v", headers, err)
	}
}

func TestConcurrentMigratorsApplyOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	const runners = 4
	results := make([]migrate.Result, runners)
	errs := make([]error, runners)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = migrate.Apply(ctx, db.Pool, "raced_outbox")
		}()
	}
	close(start)
	wg.Wait()
	applied := 0
	for i := range runners {
		if errs[i] != nil {
			t.Fatalf("runner %d: %v", i, errs[i])
		}
		applied += len(results[i].Applied)
	}
	all, _ := migrate.Load("raced_outbox")
	if applied != len(all) {
		t.Fatalf("migrations applied %d times in total, want each once (%d)", applied, len(all))
	}
}

func TestSchemaNameIsValidated(t *testing.T) {
	if _, err := migrate.Load(`x"; DROP TABLE y; --`); err == nil {
		t.Fatal("a schema name with quotes was accepted")
	}
}

func TestSequenceHasCacheOne(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	var cache int64
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT cache_size FROM pg_sequences WHERE schemaname = 'outbox' AND sequencename = 'events_sequence_seq'`).Scan(&cache); err != nil {
		t.Fatal(err)
	}
	if cache != 1 {
		t.Fatalf("events_sequence_seq cache = %d, want 1 (docs/design.md §3.2)", cache)
	}
}

// TestAllocationHead covers the head every fill and compensate decision
// rests on: 0 before the first allocation, the last value handed out after,
// one below the next value after setval(..., false), and no answer at all
// once the sequence caches more than one value (docs/design.md §3.2).
func TestAllocationHead(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	head := func() (int64, error) {
		var h int64
		err := db.Pool.QueryRow(ctx, `SELECT outbox.allocation_head()`).Scan(&h)
		return h, err
	}
	if h, err := head(); err != nil || h != 0 {
		t.Fatalf("fresh head = %d, %v; want 0", h, err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT outbox.publish('t', '{}'); SELECT outbox.publish('t', '{}')`); err != nil {
		t.Fatal(err)
	}
	if h, err := head(); err != nil || h != 2 {
		t.Fatalf("head after two publishes = %d, %v; want 2", h, err)
	}
	if _, err := db.Pool.Exec(ctx, `SELECT setval('outbox.events_sequence_seq', 10, false)`); err != nil {
		t.Fatal(err)
	}
	if h, err := head(); err != nil || h != 9 {
		t.Fatalf("head after setval(10, false) = %d, %v; want 9", h, err)
	}
	if _, err := db.Pool.Exec(ctx, `ALTER SEQUENCE outbox.events_sequence_seq CACHE 20`); err != nil {
		t.Fatal(err)
	}
	if h, err := head(); err == nil || !strings.Contains(err.Error(), "CACHE 20") {
		t.Fatalf("head with CACHE 20 = %d, %v; want a refusal", h, err)
	}
}

// docs/design.md §2: deliveries' indexes cover only rows that are not acked (acked
// rows are the bulk of the table), and each open state, dead included, has
// one.
func TestDeliveriesIndexesSkipAcked(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	rows, err := db.Pool.Query(ctx, `
		SELECT c.relname, coalesce(pg_get_expr(i.indpred, i.indrelid), '')
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'outbox.deliveries'::regclass AND NOT i.indisprimary`)
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for rows.Next() {
		var name, pred string
		if err := rows.Scan(&name, &pred); err != nil {
			t.Fatal(err)
		}
		if pred == "" || strings.Contains(pred, "acked") {
			t.Errorf("index %s covers acked rows (predicate %q)", name, pred)
		}
		for _, state := range []string{"pending", "delivered", "dead"} {
			if strings.Contains(pred, "'"+state+"'") {
				covered[state] = true
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, state := range []string{"pending", "delivered", "dead"} {
		if !covered[state] {
			t.Errorf("no partial index covers %s rows", state)
		}
	}
}

package migrations_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	migrate "github.com/outboxkeeper/outboxkeeper/shared/migrations"
)

func TestApplyTwiceIsANoOp(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	all := mustLoad(t, "second_outbox")

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
	recorded := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM second_outbox.schema_migrations`)
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
	db.Exec(t, `SELECT outbox.publish('t', '{}'); SELECT outbox.publish('t', '{}')`)
	if h, err := head(); err != nil || h != 2 {
		t.Fatalf("head after two publishes = %d, %v; want 2", h, err)
	}
	db.Exec(t, `SELECT setval('outbox.events_sequence_seq', 10, false)`)
	if h, err := head(); err != nil || h != 9 {
		t.Fatalf("head after setval(10, false) = %d, %v; want 9", h, err)
	}
	db.Exec(t, `ALTER SEQUENCE outbox.events_sequence_seq CACHE 20`)
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
	covered := map[string]bool{}
	for name, pred := range testdb.Map[string, string](t, db.Pool, `
		SELECT c.relname, coalesce(pg_get_expr(i.indpred, i.indrelid), '')
		FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = 'outbox.deliveries'::regclass AND NOT i.indisprimary`) {
		if pred == "" || strings.Contains(pred, "acked") {
			t.Errorf("index %s covers acked rows (predicate %q)", name, pred)
		}
		for _, state := range []string{"pending", "delivered", "dead"} {
			if strings.Contains(pred, "'"+state+"'") {
				covered[state] = true
			}
		}
	}
	for _, state := range []string{"pending", "delivered", "dead"} {
		if !covered[state] {
			t.Errorf("no partial index covers %s rows", state)
		}
	}
}

// waitingOnEvents says whether some session waits for a lock on the
// events table of schema.
func waitingOnEvents(t *testing.T, db *testdb.DB, schema string) bool {
	t.Helper()
	n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM pg_locks
		WHERE NOT granted AND relation = to_regclass($1)`, schema+".events")
	return n > 0
}

// holdWriter opens a writer's transaction on schema that has published
// and stays open: its lock on events is what a migration that changes the
// table has to wait for.
func holdWriter(t *testing.T, db *testdb.DB, schema string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(ctx) })
	testdb.Exec(t, tx, `SELECT `+schema+`.publish('held', '{}')`)
	return tx
}

// A migration waiting behind a long transaction must not queue every
// publisher behind it: each attempt waits at most its lock_timeout, rolls
// back and pauses, so a publisher arriving meanwhile gets through; once
// the long transaction ends, an attempt succeeds.
func TestMigrationBehindALongTransactionLetsPublishersThrough(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	oldMigrator(t, db, "queued", 6) // 0007 adds a trigger to events: it waits for every writer
	held := holdWriter(t, db, "queued")

	retried := make(chan struct{}, 100)
	done := make(chan error, 1)
	var res migrate.Result
	go func() {
		actx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var err error
		res, err = migrate.ApplyWith(actx, db.Pool, "queued", migrate.ApplyOptions{
			LockTimeout: 100 * time.Millisecond, RetryInterval: 200 * time.Millisecond,
			OnLockTimeout: func(*migrate.LockError, time.Duration) { retried <- struct{}{} },
		})
		done <- err
	}()
	for !waitingOnEvents(t, db, "queued") {
		time.Sleep(5 * time.Millisecond)
	}

	// A publisher arriving while the migration waits. Queued behind it,
	// it would wait for the long transaction; the server gives up on it
	// long before that ends.
	pub, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Rollback(ctx) //nolint:errcheck
	testdb.Exec(t, pub, `SET LOCAL statement_timeout = '5s'`)
	if _, err := pub.Exec(ctx, `SELECT queued.publish('t', '{}')`); err != nil {
		t.Fatalf("a publisher was queued behind the waiting migration: %v", err)
	}
	if err := pub.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	<-retried

	if err := held.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the migration after the long transaction ended: %v", err)
	}
	if res.Attempts < 2 {
		t.Errorf("Attempts = %d, want at least 2 (one ran out of lock_timeout)", res.Attempts)
	}
	if err := migrate.Check(ctx, db.Pool, "queued"); err != nil {
		t.Errorf("the schema after the retried migration: %v", err)
	}
}

// Behind a transaction that outlasts the migrator's budget, it gives up
// with a *LockError naming the migration that waited, having applied
// nothing.
func TestMigrationGivesUpAtItsBudgetNamingTheMigrationThatWaited(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	oldMigrator(t, db, "blocked", 6)
	holdWriter(t, db, "blocked")

	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err := migrate.ApplyWith(actx, db.Pool, "blocked", migrate.ApplyOptions{LockTimeout: 100 * time.Millisecond, RetryInterval: 100 * time.Millisecond})
	var lerr *migrate.LockError
	if !errors.As(err, &lerr) {
		t.Fatalf("Apply behind a transaction longer than its budget: %v, want a *LockError", err)
	}
	if actx.Err() != nil {
		t.Errorf("Apply returned only when its budget was spent (%v): no time was kept to answer", actx.Err())
	}
	if lerr.Step != "0007_read_side.sql" {
		t.Errorf("LockError.Step = %q, want the migration that waited, 0007_read_side.sql", lerr.Step)
	}
	if lerr.Attempts < 2 {
		t.Errorf("LockError.Attempts = %d, want retries within the budget", lerr.Attempts)
	}
	for _, want := range []string{"0007_read_side.sql", "lock_timeout 100ms", "pg_stat_activity", "nothing was applied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q: %v", want, err)
		}
	}
	recorded := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM blocked.schema_migrations`)
	if recorded != 6 {
		t.Errorf("%d migrations recorded, want the 6 from before", recorded)
	}
}

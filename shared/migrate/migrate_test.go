package migrate_test

import (
	"context"
	"sync"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/migrate"
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
		t.Fatalf("events_sequence_seq cache = %d, want 1 (DESIGN §3.2)", cache)
	}
}

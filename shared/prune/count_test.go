package prune_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
)

// Each batch is one call of a plpgsql function whose queries PostgreSQL
// plans once per server connection and keeps (plan_cache_mode =
// force_generic_plan): the pool sends every statement unnamed, so a
// batch sent as a plain statement was parsed and planned on every call.
func TestPruneBatchesArePlannedOncePerConnection(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, c := range []struct{ fn, statement string }{
		{"prune_deliveries(bigint, integer, bigint, bigint, bigint)", store.DeliveriesSQL.Statement("prune", db.Schema.Name())},
		{"prune_events(bigint, integer, bigint)", store.EventsSQL.Statement("prune", db.Schema.Name())},
	} {
		t.Run(c.fn, func(t *testing.T) {
			var lang string
			var config []string
			err := db.Pool.QueryRow(context.Background(), `SELECT l.lanname, coalesce(p.proconfig, '{}')
				FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_language AS l ON l.oid = p.prolang
				WHERE p.oid = to_regprocedure($1)`, "outbox."+c.fn).Scan(&lang, &config)
			if err != nil {
				t.Fatalf("read %s from the catalog: %v", c.fn, err)
			}
			if lang != "plpgsql" {
				t.Errorf("%s is LANGUAGE %s, want plpgsql (its plans kept per connection)", c.fn, lang)
			}
			if !contains(config, "plan_cache_mode=force_generic_plan") {
				t.Errorf("%s settings %v: want plan_cache_mode=force_generic_plan", c.fn, config)
			}
			for _, off := range []string{"enable_seqscan=off", "jit=off"} {
				if !contains(config, off) {
					t.Errorf("%s settings %v: want %s (one plan whatever the statistics)", c.fn, config, off)
				}
			}
			name, _, _ := strings.Cut(c.fn, "(")
			if !strings.Contains(c.statement, "."+name+"(") {
				t.Errorf("the prune statement does not call %s: %s", name, c.statement)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// Acked and dead rows interleaved across batches, some ranges full of
// acked rows and some not: every row goes, and each is counted once, under
// its own state.
func TestPruneCountsEachStateInMixedBatches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedDeliveries(t, db, "acked-a", "acked", 25, 10*day, 9*day, 0, 9*day)
	seedDeliveries(t, db, "dead-a", "dead", 3, 10*day, 0, 8*day, 9*day)
	seedDeliveries(t, db, "acked-b", "acked", 14, 10*day, 9*day, 0, 9*day)
	seedDeliveries(t, db, "dead-b", "dead", 12, 10*day, 0, 8*day, 9*day)
	seedDeliveries(t, db, "pending", "pending", 2, 10*day, 0, 0, 0)
	seedDeliveries(t, db, "acked-c", "acked", 10, 10*day, 9*day, 0, 9*day)

	res := run(t, newPruner(t, db.Pool, templateConfig(func(c *prune.Config) { c.BatchLimit = 10 })))

	if res.DeletedAcked != 49 {
		t.Errorf("deleted_acked = %d, want 49", res.DeletedAcked)
	}
	if res.DeletedDead != 15 {
		t.Errorf("deleted_dead = %d, want 15", res.DeletedDead)
	}
	if got := left(t, db, "pending"); got != 2 {
		t.Errorf("pending rows left = %d, want 2", got)
	}
	if res.More {
		t.Errorf("more = true after a pass over %d rows, want the table done", 66)
	}
}

// The batch that reaches the table's end reads its range and the index's
// two ends, nothing more: the probe of the highest id is made before the
// batch deletes, not after, when it would walk back through every entry
// the pass deleted (this batch's and all before it, not yet vacuumed).
func TestTheLastBatchReadsNoRowThePassDeleted(t *testing.T) {
	t.Parallel()
	const batch, batches = 100, 30
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seedDeliveries(t, db, "acked", "acked", batch*batches, 10*day, 9*day, 0, 9*day)
	testdb.Exec(t, db.Pool, `VACUUM ANALYZE outbox.deliveries`)
	rec, err := coldplan.Record(ctx, db.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	q, dp := coldplan.Bounded(rec.Conn), store.NewDeliveryPrune(db.Schema)
	var b store.DeliveryPruneBatch
	for i := range batches {
		rec.Take()
		if b, err = dp.Prune(ctx, q, store.DeliveryPruneParams{Cursor: b.Cursor, AckedAfter: day, DeadAfter: day, Limit: batch}); err != nil {
			t.Fatalf("batch %d: %v", i+1, err)
		}
	}
	if !b.Done || b.Acked != batch {
		t.Errorf("last batch: acked %d, done %v; want %d and done", b.Acked, b.Done, batch)
	}
	plans, err := rec.Take()
	if err != nil {
		t.Fatal(err)
	}
	// A range of 100 rows spans a few heap pages; each row read counts a
	// buffer, and the index adds its depth.
	const bound = 4*batch + 100
	for _, p := range plans {
		p.Root.Walk(func(n coldplan.Node) {
			if got := n.SharedHit + n.SharedRead; got > bound {
				t.Errorf("the last batch's %s read %.0f buffers, more than %d: %s",
					n.Type, got, bound, firstLine(p.Query))
			}
		})
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return fmt.Sprintf("%.80s", s)
}

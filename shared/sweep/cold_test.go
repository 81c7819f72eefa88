package sweep_test

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
)

// TestResetIsLinearOnColdStatistics: after an outage the deliveries table
// is fresh from mass UPDATEs that nothing analysed, and the planner
// guesses. A reset batch must still do work bounded by its batch in every
// node of every plan it runs (its function's too): no node that finds a
// batch's row by scanning the batch again (a nested loop over the locked
// rows), and none that reads every stuck row to pick the oldest.
func TestResetIsLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	const stuck, history, batch = 10_000, 10_000, 1_000
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := coldplan.Deliveries(ctx, db.Pool, db.Schema, stuck, history); err != nil {
		t.Fatal(err)
	}
	if err := coldplan.NeverAnalysed(ctx, db.Pool, db.Schema.Table("deliveries")); err != nil {
		t.Fatal(err)
	}
	rec, err := coldplan.Record(ctx, db.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()

	b, err := store.NewDeliverySweep(db.Schema).ResetStuck(ctx, rec.Conn, time.Minute, batch, 0)
	if err != nil {
		t.Fatal(err)
	}
	plans, err := rec.Take()
	if err != nil {
		t.Fatal(err)
	}
	if b.Reset != batch {
		t.Errorf("Reset = %d, want the whole batch, %d", b.Reset, batch)
	}
	if !b.More {
		t.Error("More = false with 9,000 stuck rows left")
	}
	if len(plans) == 0 {
		t.Fatal("no plan recorded")
	}
	for _, e := range coldplan.Check(plans, batch) {
		t.Errorf("a %d-row reset batch on cold statistics: %s", batch, e)
	}
	if t.Failed() {
		for _, p := range plans {
			t.Logf("plan: %s", coldplan.Compact(p))
		}
	}
	invariants(t, db.Pool)
}

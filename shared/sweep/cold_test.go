package sweep_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
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
	var b store.SweepBatch
	coldplan.Linear(t, ctx, db.DirectURL, "the sweep's reset", batch, func(conn *pgx.Conn) (err error) {
		b, err = store.NewDeliverySweep(db.Schema).ResetStuck(ctx, coldplan.Bounded(conn), store.ResetParams{StuckAfter: time.Minute, Limit: batch})
		return err
	})
	if b.Reset != batch {
		t.Errorf("Reset = %d, want the whole batch, %d", b.Reset, batch)
	}
	if !b.More {
		t.Error("More = false with 9,000 stuck rows left")
	}
	invariants(t, db.Pool)
}

package sweep_test

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
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
	db, ctx := coldplan.Cold(t, coldplan.Tables{Stuck: stuck, Acked: history})
	coldplan.Statements(t, ctx, db, coldplan.Statement{What: "the sweep's reset", Batch: batch, Run: func(q *pass.Bounded) error {
		b, err := store.NewDeliverySweep(db.Schema).ResetStuck(ctx, q, store.ResetParams{StuckAfter: time.Minute, Limit: batch})
		if err != nil {
			return err
		}
		if b.Reset != batch {
			t.Errorf("Reset = %d, want the whole batch, %d", b.Reset, batch)
		}
		if !b.More {
			t.Error("More = false with 9,000 stuck rows left")
		}
		return nil
	}})
	invariants(t, db.Pool)
}

package prune_test

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// TestDeletesAreLinearOnColdStatistics: prune's two deletes, on tables
// fresh from mass UPDATEs that nothing analysed, do work bounded by their
// batch in every node: a range scan of the primary key, never a scan of
// the table or a join that repeats the range.
func TestDeletesAreLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	const rows, batch = 10_000, 1_000
	db, ctx := coldplan.Cold(t, coldplan.Tables{Acked: rows, Present: rows})
	coldplan.Statements(t, ctx, db,
		coldplan.Statement{What: "prune's delete of deliveries", Batch: batch, Run: func(q *pass.Bounded) error {
			d, err := store.NewDeliveryPrune(db.Schema).Prune(ctx, q, store.DeliveryPruneParams{AckedAfter: time.Minute, DeadAfter: -1, Limit: batch})
			if err == nil && (d.Acked != batch || d.Done) {
				t.Errorf("deliveries: deleted %d acked (done %v), want the whole batch, %d, and more to come", d.Acked, d.Done, batch)
			}
			return err
		}},
		coldplan.Statement{What: "prune's delete of events", Batch: batch, Run: func(q *pass.Bounded) error {
			e, err := store.NewEventPrune(db.Schema).Prune(ctx, q, store.EventPruneParams{OlderThan: time.Minute, Limit: batch})
			if err == nil && (e.Deleted != batch || e.Done) {
				t.Errorf("events: deleted %d (done %v), want the whole batch, %d, and more to come", e.Deleted, e.Done, batch)
			}
			return err
		}},
	)
}

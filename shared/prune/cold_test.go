package prune_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// TestDeletesAreLinearOnColdStatistics: prune's two deletes, on tables
// fresh from mass UPDATEs that nothing analysed, do work bounded by their
// batch in every node: a range scan of the primary key, never a scan of
// the table or a join that repeats the range.
func TestDeletesAreLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	const rows, batch = 10_000, 1_000
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := coldplan.Deliveries(ctx, db.Pool, db.Schema, 0, rows); err != nil {
		t.Fatal(err)
	}
	if err := coldplan.Events(ctx, db.Pool, db.Schema, rows, 0); err != nil {
		t.Fatal(err)
	}
	if err := coldplan.NeverAnalysed(ctx, db.Pool, db.Schema.Table("deliveries"), db.Schema.Table("events")); err != nil {
		t.Fatal(err)
	}
	var d store.DeliveryPruneBatch
	coldplan.Linear(t, ctx, db.DirectURL, "prune's delete of deliveries", batch, func(conn *pgx.Conn) (err error) {
		d, err = store.NewDeliveryPrune(db.Schema).Prune(ctx, coldplan.Bounded(conn), store.DeliveryPruneParams{AckedAfter: time.Minute, DeadAfter: -1, Limit: batch})
		return err
	})
	if d.Acked != batch || d.Done {
		t.Errorf("deliveries: deleted %d acked (done %v), want the whole batch, %d, and more to come", d.Acked, d.Done, batch)
	}
	var e store.PruneBatch
	coldplan.Linear(t, ctx, db.DirectURL, "prune's delete of events", batch, func(conn *pgx.Conn) (err error) {
		e, err = store.NewEventPrune(db.Schema).Prune(ctx, coldplan.Bounded(conn), store.EventPruneParams{OlderThan: time.Minute, Limit: batch})
		return err
	})
	if e.Deleted != batch || e.Done {
		t.Errorf("events: deleted %d (done %v), want the whole batch, %d, and more to come", e.Deleted, e.Done, batch)
	}
}

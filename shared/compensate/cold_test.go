package compensate

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// TestCheckAndInsertAreLinearOnColdStatistics: compensate's two
// statements do work bounded by their batch in every node, on an events
// table fresh from mass UPDATEs that nothing analysed: the check reads
// the lock table once for the batch, not once per writer it asks about
// (half the batch is above xmax, where it asks pg_locks, and another
// session holds 2,000 locks meanwhile), and the insert probes the primary
// key once per sequence.
func TestCheckAndInsertAreLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	const present, batch = 10_000, 1_000
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := coldplan.Events(ctx, db.Pool, db.Schema, present, 2*batch); err != nil {
		t.Fatal(err)
	}
	if err := coldplan.NeverAnalysed(ctx, db.Pool, db.Schema.Table("events")); err != nil {
		t.Fatal(err)
	}
	var xmax uint64
	if err := db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	xids := checkXIDs(xmax, batch)
	holder := db.Connect(t)
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(g) FROM generate_series(1, 2000) g`); err != nil {
		t.Fatal(err)
	}
	var got int
	coldplan.Linear(t, ctx, db.DirectURL, "compensate's check", batch, func(conn *pgx.Conn) error {
		rows, err := coldplan.Bounded(conn).Query(ctx, checkFile.Statement("check", db.Schema.Name()), checkArgs(xids))
		if err != nil {
			return err
		}
		for rows.Next() {
			got++
		}
		return rows.Err()
	})
	if got != batch {
		t.Errorf("the check answered %d rows for %d xids", got, batch)
	}

	seqs := make([]int64, batch)
	for i := range seqs {
		seqs[i] = present + 1 + int64(i)
	}
	var w store.Written
	coldplan.Linear(t, ctx, db.DirectURL, "compensate's placeholder insert", batch, func(conn *pgx.Conn) (err error) {
		w, err = store.NewEvents(db.Schema).InsertPlaceholders(ctx, coldplan.Bounded(conn), seqs, store.FilledByCompensate)
		return err
	})
	if w.N != batch {
		t.Errorf("the insert wrote %d placeholders, want %d", w.N, batch)
	}
}

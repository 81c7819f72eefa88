package compensate

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
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
	ctx := testenv.Context(t, 2*time.Minute)
	coldplan.ColdEvents(t, ctx, db.Pool, db.Schema, present, 2*batch)
	xids := checkXIDs(testdb.Scalar[uint64](t, db.Pool, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`), batch)
	testdb.Exec(t, db.Connect(t), `SELECT pg_advisory_lock(g) FROM generate_series(1, 2000) g`)
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

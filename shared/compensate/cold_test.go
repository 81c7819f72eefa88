package compensate

import (
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
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
	db, ctx := coldplan.Cold(t, coldplan.Tables{Present: present, Missing: 2 * batch})
	xids := checkXIDs(testdb.Scalar[uint64](t, db.Pool, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`), batch)
	testdb.Exec(t, db.Connect(t), `SELECT pg_advisory_lock(g) FROM generate_series(1, 2000) g`)
	coldplan.Statements(t, ctx, db,
		coldplan.Statement{What: "compensate's check", Batch: batch, Run: func(q *pass.Bounded) error {
			rows, err := q.Query(ctx, checkFile.Statement("check", db.Schema.Name()), checkArgs(xids))
			if err != nil {
				return err
			}
			got := 0
			for rows.Next() {
				got++
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if got != batch {
				t.Errorf("the check answered %d rows for %d xids", got, batch)
			}
			return nil
		}},
		coldplan.Statement{What: "compensate's placeholder insert", Batch: batch, Run: func(q *pass.Bounded) error {
			w, err := store.NewEvents(db.Schema).InsertPlaceholders(ctx, q, coldplan.Sequences(present+1, batch), store.FilledByCompensate)
			if err == nil && w.N != batch {
				t.Errorf("the insert wrote %d placeholders, want %d", w.N, batch)
			}
			return err
		}},
	)
}

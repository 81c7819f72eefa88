package relay

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// TestStatementsAreLinearOnColdStatistics: the relay's idle tick (the
// probe the lease poll carries), its refusals' record and forget, and the
// read it sends, on a table fresh from mass UPDATEs that nothing analysed,
// each do work bounded by its batch in every node: the probe one primary
// key probe whatever the table's size, never a scan of the table.
func TestStatementsAreLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	const rows, batch = 20_000, 1_000
	db, ctx := coldplan.Cold(t, coldplan.Tables{Present: rows})
	db.Exec(t, `SELECT outbox.commit_position('relay:default', $1)`, rows/2)
	sql := newStatements(testdb.Schema)

	seqs := coldplan.Sequences(rows/2+1, batch)
	topics, attempts, errs, park := make([]string, batch), make([]int32, batch), make([]string, batch), make([]bool, batch)
	for i := range seqs {
		topics[i], attempts[i], errs[i] = "cold", 1, "InvalidMessageContents: x"
	}
	coldplan.Statements(t, ctx, db,
		coldplan.Statement{What: "the idle tick's probe", Batch: 1, Run: func(q *pass.Bounded) error {
			var readable bool
			err := q.QueryRow(ctx, sql.readable, pgx.NamedArgs{"name": "relay:default"}).Scan(&readable)
			if err == nil && !readable {
				t.Error("the probe says nothing to read after the middle of the table")
			}
			return err
		}},
		coldplan.Statement{What: "the record of refusals", Batch: batch, Run: func(q *pass.Bounded) error {
			rows, err := q.Query(ctx, sql.recordRefusals, pgx.NamedArgs{
				"relay": "default", "sequences": seqs, "topics": topics, "attempts": attempts, "errors": errs, "park": park,
			})
			if err != nil {
				return err
			}
			rows.Close()
			return rows.Err()
		}},
		coldplan.Statement{What: "the forget of refusals", Batch: batch, Run: func(q *pass.Bounded) error {
			_, err := q.Exec(ctx, sql.forgetRefusals, pgx.NamedArgs{"relay": "default", "position": rows})
			return err
		}},
	)
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.relay_parked`); n != 0 {
		t.Errorf("%d rows left after the forget, want 0", n)
	}
}

package relay

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// TestStatementsAreLinearOnColdStatistics: the relay's idle tick (the
// probe the lease poll carries), its refusals' record and forget, and the
// read it sends, on a table fresh from mass UPDATEs that nothing analysed,
// each do work bounded by its batch in every node: the probe one primary
// key probe whatever the table's size, never a scan of the table.
func TestStatementsAreLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	const rows, batch = 20_000, 1_000
	db := testdb.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := coldplan.Events(ctx, db.Pool, db.Schema, rows, 0); err != nil {
		t.Fatal(err)
	}
	if err := coldplan.NeverAnalysed(ctx, db.Pool, db.Schema.Table("events")); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `SELECT outbox.commit_position('relay:default', $1)`, rows/2)
	sql := newStatements(testdb.Schema)

	var readable bool
	coldplan.Linear(t, ctx, db.DirectURL, "the idle tick's probe", 1, func(conn *pgx.Conn) error {
		return coldplan.Bounded(conn).QueryRow(ctx, sql.readable, pgx.NamedArgs{"name": "relay:default"}).Scan(&readable)
	})
	if !readable {
		t.Error("the probe says nothing to read after the middle of the table")
	}

	seqs := make([]int64, batch)
	topics, attempts, errs, park := make([]string, batch), make([]int32, batch), make([]string, batch), make([]bool, batch)
	for i := range seqs {
		seqs[i], topics[i], attempts[i], errs[i] = int64(rows/2+1+i), "cold", 1, "InvalidMessageContents: x"
	}
	coldplan.Linear(t, ctx, db.DirectURL, "the record of refusals", batch, func(conn *pgx.Conn) error {
		rows, err := coldplan.Bounded(conn).Query(ctx, sql.recordRefusals, pgx.NamedArgs{
			"relay": "default", "sequences": seqs, "topics": topics, "attempts": attempts, "errors": errs, "park": park,
		})
		if err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
	coldplan.Linear(t, ctx, db.DirectURL, "the forget of refusals", batch, func(conn *pgx.Conn) error {
		_, err := coldplan.Bounded(conn).Exec(ctx, sql.forgetRefusals, pgx.NamedArgs{"relay": "default", "position": rows})
		return err
	})
	if n := testdb.Scalar[int](t, db.Pool, `SELECT count(*) FROM outbox.relay_parked`); n != 0 {
		t.Errorf("%d rows left after the forget, want 0", n)
	}
}

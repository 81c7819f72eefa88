package deliver

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// TestStatementsAreLinearOnColdStatistics: the claim, the idle tick's
// probe and the settle, on a deliveries table of acked history and a
// backlog fresh from mass UPDATEs that nothing analysed, each do work
// bounded by their batch in every node: never a scan of the history.
func TestStatementsAreLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	const history, pending, batch = 20_000, 2_000, 100
	db := testdb.New(t)
	ctx := testenv.Context(t, 2*time.Minute)
	table := db.Schema.Table("deliveries")
	if err := coldplan.Chill(ctx, db.Pool, table); err != nil {
		t.Fatal(err)
	}
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, acked_at)
		SELECT 'r', 'k', '{}'::bytea, 'acked', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
		FROM generate_series(1, $1)`, history)
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'r', 'k', '{}'::bytea FROM generate_series(1, $1)`, pending)
	for range 2 {
		db.Exec(t, `UPDATE outbox.deliveries SET kind = kind`)
	}
	if err := coldplan.NeverAnalysed(ctx, db.Pool, table); err != nil {
		t.Fatal(err)
	}
	addRecipient(t, db, "r", "https://example.com/in")
	sql := newStatements(testdb.Schema)
	s := &Service{sql: sql}
	var ids []int64
	coldplan.Statements(t, ctx, db,
		coldplan.Statement{What: "the idle tick's probe", Batch: 1, Run: func(q *pass.Bounded) error {
			var any bool
			err := q.QueryRow(ctx, sql.pendingProbe).Scan(&any)
			if err == nil && !any {
				t.Error("the probe says nothing is pending")
			}
			return err
		}},
		coldplan.Statement{What: "the claim", Batch: batch, Run: func(q *pass.Bounded) error {
			ds, err := s.claim(ctx, q, batch)
			for _, d := range ds {
				ids = append(ids, d.ID)
			}
			return err
		}},
	)
	if len(ids) != batch {
		t.Fatalf("the claim took %d rows, want %d", len(ids), batch)
	}
	coldplan.Statements(t, ctx, db, coldplan.Statement{What: "the settle", Batch: batch, Run: func(q *pass.Bounded) error {
		a, _, err := s.settle(ctx, q, ids, []int64{})
		if err == nil && a != batch {
			t.Errorf("the settle acked %d, want %d", a, batch)
		}
		return err
	}})
}

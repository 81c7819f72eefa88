package deliver

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// TestTheClaimLooksEachRecipientUpOnceToMoveIt: the claim reads a row's
// recipient once for the move (the reason, which the five columns it sets
// share) and once for the target it answers; a subquery the planner
// flattened would repeat the move's lookup in each column.
func TestTheClaimLooksEachRecipientUpOnceToMoveIt(t *testing.T) {
	t.Parallel()
	const batch = 50
	db := testdb.New(t)
	ctx := testenv.Context(t, time.Minute)
	addRecipient(t, db, "r", "https://example.com/in")
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'r', 'k', '{}'::bytea FROM generate_series(1, $1)`, batch)
	s := &Service{sql: newStatements(testdb.Schema)}
	plans := coldplan.Linear(t, ctx, db.URL, "the claim", batch, func(conn *pgx.Conn) error {
		ds, err := s.claim(ctx, coldplan.Bounded(conn), batch)
		if err == nil && len(ds) != batch {
			t.Errorf("the claim took %d rows, want %d", len(ds), batch)
		}
		return err
	})
	var lookups float64
	for _, p := range plans {
		p.Root.Walk(func(n coldplan.Node) {
			if n.Relation == "recipients" {
				lookups += n.Loops
			}
		})
	}
	if lookups != 2*batch {
		t.Errorf("the claim of %d rows read recipients %.0f times, want %d (once to move a row, once for its target)", batch, lookups, 2*batch)
	}
}

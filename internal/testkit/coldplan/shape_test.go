package coldplan_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// TestPlanShapesDoNotDependOnStatistics: each set-based statement runs
// with the same plan, node for node, whatever the planner knows: on
// tables fresh from mass UPDATEs that nothing analysed, at a batch of
// 1,000 and of 10,000, and on the same tables analysed.
func TestPlanShapesDoNotDependOnStatistics(t *testing.T) {
	t.Parallel()
	const rows = 20_000
	schema := store.MustSchema(testdb.Schema)
	fresh := testdb.Seeded(t, func(ctx context.Context, conn *pgx.Conn) error {
		if err := coldplan.Deliveries(ctx, conn, schema, rows, rows); err != nil {
			return err
		}
		return coldplan.Events(ctx, conn, schema, rows, rows)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stmts := coldStatements(schema, rows)
	shapes := map[string]map[string]string{} // statement → variant → shape
	for _, analysed := range []bool{false, true} {
		for _, batch := range []int{1_000, 10_000} {
			variant := fmt.Sprintf("cold, batch %d", batch)
			db := fresh()
			if analysed {
				variant = fmt.Sprintf("analysed, batch %d", batch)
				if _, err := db.Pool.Exec(ctx, `ANALYZE`); err != nil {
					t.Fatal(err)
				}
			}
			rec, err := coldplan.Record(ctx, db.DirectURL)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stmts {
				if _, err := s.run(ctx, rec.Conn, batch); err != nil {
					t.Fatalf("%s, %s: %v", s.key, variant, err)
				}
				plans, err := rec.Take()
				if err != nil {
					t.Fatal(err)
				}
				var shape []string
				for _, p := range plans {
					shape = append(shape, coldplan.Shape(p, "deliveries", "events"))
				}
				if shapes[s.key] == nil {
					shapes[s.key] = map[string]string{}
				}
				shapes[s.key][variant] = strings.Join(shape, " ; ")
			}
			rec.Close()
		}
	}
	for _, s := range stmts {
		want := shapes[s.key]["cold, batch 1000"]
		for variant, got := range shapes[s.key] {
			if got != want {
				t.Errorf("%s: %s runs\n\t%s\nbut cold, batch 1000 runs\n\t%s", s.key, variant, got, want)
			}
		}
	}
}

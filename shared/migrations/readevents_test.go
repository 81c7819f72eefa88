package migrations_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// read_events on a million-row table is one index range scan of the
// primary key, whatever the table's size: the plan of its query reads
// events through events_pkey only, never a sequential scan, and touches a
// few pages for a page of 100 (a handful of index and heap pages, not the
// table's thousands), in the middle of the table and from its start. The
// function is plpgsql (0012), so EXPLAIN of a call shows a Function Scan;
// auto_explain with nested statements shows the query inside, the plan the
// function keeps.
func TestReadEventsIsOneIndexRangeScanOnAMillionRows(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	for _, sql := range []string{
		`INSERT INTO outbox.events (sequence, xid, topic, payload) SELECT g, '5', 't', '{"n":1}' FROM generate_series(1, 1000000) g`,
		`SELECT setval('outbox.events_sequence_seq', 1000000)`,
		// A pruned prefix, a gap above the watermark.
		`DELETE FROM outbox.events WHERE sequence <= 1000 OR sequence = 900000`,
		`UPDATE outbox.fill_state SET started = true, watermark = 899999`,
		`ANALYZE outbox.events`,
		`ANALYZE outbox.fill_state`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	pages := testdb.Scalar[int64](t, db.Pool, `SELECT relpages FROM pg_class WHERE oid = 'outbox.events'::regclass`)
	rec, err := coldplan.Record(ctx, db.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	for _, c := range []struct {
		name  string
		after int64
		rows  float64
	}{
		{"from the start, over the pruned prefix", 0, 100},
		{"in the middle", 500000, 100},
		{"stopping at the gap above the watermark", 899950, 49},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec.Take()
			n := testdb.Scalar[float64](t, rec.Conn, `SELECT count(*) FROM outbox.read_events($1, 100)`, c.after)
			if n != c.rows {
				t.Errorf("%s: %v rows, want %v", c.name, n, c.rows)
			}
			plans, err := rec.Take()
			if err != nil {
				t.Fatal(err)
			}
			root, ok := planReading(plans, "events")
			if !ok {
				t.Fatalf("%s: no plan reads events among the nested statements: %+v", c.name, plans)
			}
			raw, _ := json.Marshal(root)
			var indexScans, seqScans int
			root.Walk(func(n coldplan.Node) {
				if n.Relation != "events" {
					return
				}
				switch n.Type {
				case "Index Scan", "Index Only Scan":
					if n.Index == "events_pkey" {
						indexScans++
					}
				default:
					seqScans++
				}
			})
			if indexScans != 1 {
				t.Errorf("%s: %d index scans of events_pkey, want 1:\n%s", c.name, indexScans, raw)
			}
			if seqScans != 0 {
				t.Errorf("%s: %d other scans of events, want none:\n%s", c.name, seqScans, raw)
			}
			if root.Rows != c.rows {
				t.Errorf("%s: the query returned %v rows, want %v", c.name, root.Rows, c.rows)
			}
			if touched := root.SharedHit + root.SharedRead; touched > 30 {
				t.Errorf("%s: %.0f pages touched for 100 rows of a %d-page table, want at most 30", c.name, touched, pages)
			} else {
				t.Logf("%s: %.0f pages touched of %d, cost %.1f", c.name, touched, pages, root.Cost)
			}
		})
	}
}

// read_events on an events table fresh from mass UPDATEs that nothing
// analysed does work bounded by its page in every node of the query it
// keeps (a generic plan, which knows neither the cursor nor the page
// size): a range scan of events_pkey, at a page of 1,000 and at the
// largest, 10,000, on a table no larger than that.
func TestReadEventsIsLinearOnColdStatistics(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	if err := coldplan.Events(ctx, db.Pool, db.Schema, outbox.MaxRead, 0); err != nil {
		t.Fatal(err)
	}
	if err := coldplan.NeverAnalysed(ctx, db.Pool, db.Schema.Table("events")); err != nil {
		t.Fatal(err)
	}
	for _, page := range []int{1_000, outbox.MaxRead} {
		var got []outbox.Event
		coldplan.Linear(t, ctx, db.DirectURL, "read_events", page, func(conn *pgx.Conn) error {
			ob, err := outbox.New(conn, outbox.Options{Schema: db.Schema.Name()})
			if err != nil {
				return err
			}
			got, err = ob.ReadContiguous(ctx, 0, page)
			return err
		})
		if len(got) != page {
			t.Errorf("read_events(0, %d): %d events", page, len(got))
		}
	}
}

// planReading is the root of the first plan with a node on relation.
func planReading(plans []coldplan.Plan, relation string) (coldplan.Node, bool) {
	for _, p := range plans {
		found := false
		p.Root.Walk(func(n coldplan.Node) { found = found || n.Relation == relation })
		if found {
			return p.Root, true
		}
	}
	return coldplan.Node{}, false
}

package migrations_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
)

// planNode is one node of EXPLAIN (FORMAT JSON).
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	SharedHit    int64      `json:"Shared Hit Blocks"`
	SharedRead   int64      `json:"Shared Read Blocks"`
	ActualRows   float64    `json:"Actual Rows"`
	TotalCost    float64    `json:"Total Cost"`
	Plans        []planNode `json:"Plans"`
}

func (n planNode) walk(fn func(planNode)) {
	fn(n)
	for _, c := range n.Plans {
		c.walk(fn)
	}
}

// read_events on a million-row table is one index range scan of the
// primary key, whatever the table's size: the plan reads events through
// events_pkey only, never a sequential scan, and touches a few pages for
// a page of 100 (a handful of index and heap pages, not the table's
// thousands), in the middle of the table and from its start.
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
	var pages int64
	if err := db.Pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = 'outbox.events'::regclass`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		after int64
		rows  float64
	}{
		{"from the start, over the pruned prefix", 0, 100},
		{"in the middle", 500000, 100},
		{"stopping at the gap above the watermark", 899950, 49},
	} {
		var doc []struct {
			Plan planNode `json:"Plan"`
		}
		var raw string
		if err := db.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM outbox.read_events($1, 100)`, c.after).Scan(&raw); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(raw), &doc); err != nil || len(doc) != 1 {
			t.Fatalf("%s: plan %s: %v", c.name, raw, err)
		}
		root := doc[0].Plan
		var indexScans, seqScans int
		root.walk(func(n planNode) {
			if n.RelationName != "events" {
				return
			}
			switch n.NodeType {
			case "Index Scan", "Index Only Scan":
				if n.IndexName == "events_pkey" {
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
		if root.ActualRows != c.rows {
			t.Errorf("%s: %v rows, want %v", c.name, root.ActualRows, c.rows)
		}
		if touched := root.SharedHit + root.SharedRead; touched > 30 {
			t.Errorf("%s: %d pages touched for 100 rows of a %d-page table, want at most 30", c.name, touched, pages)
		} else {
			t.Logf("%s: %d pages touched of %d, cost %.1f", c.name, touched, pages, root.TotalCost)
		}
	}
}

package migrations_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
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
	conn, notices := explainingConn(t, db)
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
			notices.reset()
			n := testdb.Scalar[float64](t, conn, `SELECT count(*) FROM outbox.read_events($1, 100)`, c.after)
			if n != c.rows {
				t.Errorf("%s: %v rows, want %v", c.name, n, c.rows)
			}
			raw, root, ok := notices.planReading("events")
			if !ok {
				t.Fatalf("%s: no plan reads events among the nested statements:\n%s", c.name, notices.all())
			}
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
				t.Errorf("%s: the query returned %v rows, want %v", c.name, root.ActualRows, c.rows)
			}
			if touched := root.SharedHit + root.SharedRead; touched > 30 {
				t.Errorf("%s: %d pages touched for 100 rows of a %d-page table, want at most 30", c.name, touched, pages)
			} else {
				t.Logf("%s: %d pages touched of %d, cost %.1f", c.name, touched, pages, root.TotalCost)
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

// explainingConn is a connection of its own straight to the server (the
// settings are the session's) on which auto_explain sends the plan of
// every statement, nested ones included, as a NOTICE, collected in the
// returned notices.
func explainingConn(t *testing.T, db *testdb.DB) (*pgx.Conn, *noticeLog) {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(db.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	log := &noticeLog{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { log.add(n.Message) }
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, sql := range []string{
		`LOAD 'auto_explain'`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`,
		`SET auto_explain.log_analyze = on`,
		`SET auto_explain.log_buffers = on`,
		`SET auto_explain.log_format = json`,
		`SET auto_explain.log_level = notice`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	return conn, log
}

// noticeLog collects auto_explain's notices: "duration: ... plan:\n{json}".
type noticeLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *noticeLog) add(m string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, m)
}

func (l *noticeLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = nil
}

func (l *noticeLog) all() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.msgs, "\n")
}

// planReading is the first logged plan with a node on relation, its JSON
// and its root.
func (l *noticeLog) planReading(relation string) (string, planNode, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		i := strings.Index(m, "{")
		if i < 0 {
			continue
		}
		var doc struct {
			Plan planNode `json:"Plan"`
		}
		if json.Unmarshal([]byte(m[i:]), &doc) != nil {
			continue
		}
		found := false
		doc.Plan.walk(func(n planNode) { found = found || n.RelationName == relation })
		if found {
			return m[i:], doc.Plan, true
		}
	}
	return "", planNode{}, false
}

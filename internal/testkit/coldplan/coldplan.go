// Package coldplan is what the tests and benchmarks of "linear whatever
// the statistics" share: tables made cold the way a relay outage leaves
// them (autovacuum off, a mass UPDATE, never analysed), the plans a
// statement really ran with, nested ones included, and the check that
// every node of them did work bounded by the statement's batch.
//
// The plans come from auto_explain with ANALYZE and BUFFERS on a
// connection of their own straight to the server (LOAD is per session,
// which a transaction pooler cannot keep), logged as NOTICEs in JSON. A plan is judged by the
// rows its nodes produced and discarded, never by time.
package coldplan

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Node is one node of an executed plan, as EXPLAIN (ANALYZE, FORMAT JSON)
// writes it. Rows and the rows removed are per loop, as EXPLAIN reports
// them.
type Node struct {
	Type                string  `json:"Node Type"`
	Relation            string  `json:"Relation Name"`
	Index               string  `json:"Index Name"`
	Function            string  `json:"Function Name"`
	Operation           string  `json:"Operation"`
	CTE                 string  `json:"CTE Name"`
	Parent              string  `json:"Parent Relationship"`
	Subplan             string  `json:"Subplan Name"`
	Rows                float64 `json:"Actual Rows"`
	Loops               float64 `json:"Actual Loops"`
	RemovedByFilter     float64 `json:"Rows Removed by Filter"`
	RemovedByJoinFilter float64 `json:"Rows Removed by Join Filter"`
	SharedHit           float64 `json:"Shared Hit Blocks"`
	SharedRead          float64 `json:"Shared Read Blocks"`
	Cost                float64 `json:"Total Cost"`
	Plans               []Node  `json:"Plans"`
}

// Plan is one statement's executed plan: a top-level one, or one run
// inside a function it called. JIT is set when the plan was compiled.
type Plan struct {
	Query string          `json:"Query Text"`
	Root  Node            `json:"Plan"`
	JIT   json.RawMessage `json:"JIT"`
}

// Recorder is a connection whose every statement, and every statement
// run inside a function it calls, leaves its executed plan here.
type Recorder struct {
	Conn  *pgx.Conn
	mu    sync.Mutex
	plans []Plan
	err   error
}

// Record connects to url (straight to the server, as a superuser: LOAD
// needs one) with the functions' query mode, every statement unnamed and
// planned with its parameters, and turns auto_explain on for the session.
// The session also compiles every plan that leaves JIT on, whatever its
// estimated cost (jit_above_cost = 0): the planner compiles once the
// estimate passes the threshold, and the estimate grows with the table and
// the statistics, not the batch, so a statement that would be compiled on
// a table large enough shows it here on a small one.
func Record(ctx context.Context, url string) (*Recorder, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	r := &Recorder{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { r.notice(n.Message) }
	if r.Conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		return nil, err
	}
	for _, s := range []string{
		`LOAD 'auto_explain'`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_analyze = on`,
		`SET auto_explain.log_timing = off`,
		`SET auto_explain.log_buffers = on`,
		`SET auto_explain.log_nested_statements = on`,
		`SET auto_explain.log_format = json`,
		`SET auto_explain.log_level = notice`,
		`SET client_min_messages = notice`,
		`SET jit_above_cost = 0`,
	} {
		if _, err := r.Conn.Exec(ctx, s); err != nil {
			r.Conn.Close(ctx)
			return nil, fmt.Errorf("coldplan: %s: %w", s, err)
		}
	}
	r.Take() // the SETs' own plans, if any
	return r, nil
}

// notice keeps an auto_explain plan ("duration: ... plan:\n{json}").
func (r *Recorder) notice(msg string) {
	_, body, ok := strings.Cut(msg, "plan:\n")
	if !ok || !strings.HasPrefix(msg, "duration:") {
		return
	}
	var p Plan
	err := json.Unmarshal([]byte(body), &p)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.err = fmt.Errorf("coldplan: read a plan: %w", err)
		return
	}
	if strings.HasPrefix(strings.TrimSpace(p.Query), "SELECT set_config(") {
		return // pass.Bounded's settings, sent ahead of each statement
	}
	r.plans = append(r.plans, p)
}

// Take returns the plans recorded since the last Take, and any plan that
// could not be read.
func (r *Recorder) Take() ([]Plan, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.plans, r.err
	r.plans, r.err = nil, nil
	return p, err
}

// Close ends the session.
func (r *Recorder) Close() { r.Conn.Close(context.Background()) }

// Bound is the most rows one node may produce, or discard, over all its
// loops, for a statement of batch rows: the batch's rows in each of the
// up to three versions the mass UPDATEs left (an index scan counts the
// dead ones too), and a constant for the statement's bookkeeping. Work
// beyond it grows with the table, or with the batch squared.
func Bound(batch int) float64 { return float64(4*batch + 100) }

// Excess is a node that did more work than the bound.
type Excess struct {
	Query string
	Node  string
	What  string // "rows", "removed by filter", "removed by join filter"
	Count float64
	Bound float64
}

func (e Excess) String() string {
	if e.Bound == 0 {
		return fmt.Sprintf("%s: %s", e.Node, e.What)
	}
	return fmt.Sprintf("%s: %.0f %s, more than %.0f", e.Node, e.Count, e.What, e.Bound)
}

// Check lists every node of plans that produced or discarded more rows,
// over all its loops, than Bound(batch), and every plan that was compiled
// (a step of 10 ms to 0.3 s that a cost estimate, not the batch, decides).
// A plan that only calls a set-returning function (a Function Scan) is
// not judged compiled: its estimate is the function's declared cost,
// whatever the tables hold; the statements inside are judged themselves.
func Check(plans []Plan, batch int) []Excess {
	bound := Bound(batch)
	var out []Excess
	for _, p := range plans {
		if len(p.JIT) > 0 && string(p.JIT) != "null" && p.Root.Type != "Function Scan" {
			out = append(out, Excess{Query: p.Query, Node: label(p.Root), What: "compiled (JIT)", Count: 1})
		}
		p.Root.Walk(func(n Node) {
			loops := max(n.Loops, 1)
			for _, c := range []struct {
				what  string
				count float64
			}{
				{"rows", n.Rows * loops},
				{"removed by filter", n.RemovedByFilter * loops},
				{"removed by join filter", n.RemovedByJoinFilter * loops},
			} {
				if c.count > bound {
					out = append(out, Excess{Query: p.Query, Node: label(n), What: c.what, Count: c.count, Bound: bound})
				}
			}
		})
	}
	return out
}

// Walk calls f on n and on every node below it, parents first.
func (n Node) Walk(f func(Node)) {
	f(n)
	for _, c := range n.Plans {
		c.Walk(f)
	}
}

// label names a node: its type (the operation of a ModifyTable) and
// what it reads.
func label(n Node) string {
	s := n.Type
	if n.Type == "ModifyTable" && n.Operation != "" {
		s = n.Operation
	}
	switch {
	case n.CTE != "":
		s += " " + n.CTE
	case n.Index != "":
		s += " " + n.Index
	case n.Relation != "":
		s += " " + n.Relation
	case n.Function != "":
		s += " " + n.Function
	}
	return s
}

// Compact writes a plan's node tree on one line, children in brackets:
// "Limit[LockRows[Index Scan deliveries_delivered_idx]]". Nodes that only
// pass rows on (Result, CTE Scan, Subquery Scan) are left out when they
// have one child.
func Compact(p Plan) string {
	var b strings.Builder
	compact(&b, p.Root)
	return b.String()
}

func compact(b *strings.Builder, n Node) { tree(b, n, compact) }

// tree writes n as Compact does, each child as child writes it: a
// pass-through node (Result, Subquery Scan, CTE Scan) of one child is that
// child, any other node is its label and its children in brackets.
func tree(b *strings.Builder, n Node, child func(*strings.Builder, Node)) {
	switch n.Type {
	case "Result", "Subquery Scan", "CTE Scan":
		if len(n.Plans) == 1 {
			child(b, n.Plans[0])
			return
		}
	}
	b.WriteString(label(n))
	if len(n.Plans) == 0 {
		return
	}
	b.WriteByte('[')
	for i, c := range n.Plans {
		if i > 0 {
			b.WriteString(", ")
		}
		child(b, c)
	}
	b.WriteByte(']')
}

// Querier is what Chill needs.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Chill turns autovacuum off for each table (schema-qualified names), so
// nothing analyses or vacuums it behind the test's back; a seed then
// fills it and runs its mass UPDATEs.
func Chill(ctx context.Context, q Querier, tables ...string) error {
	for _, t := range tables {
		if _, err := q.Exec(ctx, `ALTER TABLE `+t+` SET (autovacuum_enabled = off, toast.autovacuum_enabled = off)`); err != nil {
			return fmt.Errorf("coldplan: autovacuum off for %s: %w", t, err)
		}
	}
	return nil
}

// NeverAnalysed fails unless each table has no planner statistics: no
// row in pg_statistic, never analysed by anyone, and no row count the
// planner could go by (reltuples -1: never vacuumed either).
func NeverAnalysed(ctx context.Context, q Querier, tables ...string) error {
	for _, t := range tables {
		var stats, analysed int
		var reltuples float64
		if err := q.QueryRow(ctx, `SELECT
				(SELECT count(*) FROM pg_catalog.pg_statistic WHERE starelid = $1::regclass),
				(SELECT count(*) FROM pg_catalog.pg_stat_all_tables WHERE relid = $1::regclass
					AND (last_analyze IS NOT NULL OR last_autoanalyze IS NOT NULL OR last_vacuum IS NOT NULL OR last_autovacuum IS NOT NULL)),
				(SELECT reltuples FROM pg_catalog.pg_class WHERE oid = $1::regclass)`, t).Scan(&stats, &analysed, &reltuples); err != nil {
			return fmt.Errorf("coldplan: statistics of %s: %w", t, err)
		}
		if stats > 0 || analysed > 0 || reltuples >= 0 {
			return fmt.Errorf("coldplan: %s has statistics (%d pg_statistic rows, analysed or vacuumed: %v, reltuples %.0f): not cold", t, stats, analysed > 0, reltuples)
		}
	}
	return nil
}

// Shape writes a plan's node tree as Compact does, but as the statement's
// work on its batch's tables sees it: a scan of one of those tables
// through an index is "range <index>" however it is read (an index scan,
// an index-only scan, a bitmap heap scan of that index: each reads the
// same range of it), and a subtree that reads only other tables (a
// one-row state table, the consumers) is "read <table>", however the
// planner reads it. Two plans of the same shape do the same work on the
// batch's tables, in the same order.
func Shape(p Plan, batchTables ...string) string {
	var b strings.Builder
	shape(&b, p.Root, batchTables)
	return b.String()
}

func shape(b *strings.Builder, n Node, batch []string) {
	if rels, only := otherTables(n, batch); only {
		b.WriteString("read " + strings.Join(rels, "+"))
		return
	}
	if slices.Contains(batch, n.Relation) {
		switch n.Type {
		case "Index Scan", "Index Only Scan":
			b.WriteString("range " + n.Index)
			return
		case "Bitmap Heap Scan":
			if len(n.Plans) == 1 && n.Plans[0].Type == "Bitmap Index Scan" {
				b.WriteString("range " + n.Plans[0].Index)
				return
			}
		}
	}
	tree(b, n, func(b *strings.Builder, c Node) { shape(b, c, batch) })
}

// otherTables lists the tables n's subtree reads, and says whether it
// reads some and none of them is a batch table.
func otherTables(n Node, batch []string) ([]string, bool) {
	var rels []string
	only := true
	n.Walk(func(c Node) {
		if c.Relation == "" {
			return
		}
		if slices.Contains(batch, c.Relation) {
			only = false
		}
		if !slices.Contains(rels, c.Relation) {
			rels = append(rels, c.Relation)
		}
	})
	slices.Sort(rels)
	return rels, only && len(rels) > 0
}

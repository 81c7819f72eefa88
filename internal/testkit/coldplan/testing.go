package coldplan

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Bounded is conn as a pass sends its statements: each in its own
// implicit transaction behind pass.Bounded's settings, a minute away.
func Bounded(conn *pgx.Conn) *pass.Bounded {
	return &pass.Bounded{DB: conn, Deadline: time.Now().Add(time.Minute)}
}

// Linear runs fn on a recording connection to url (straight to the
// server) and fails t, naming what, for every node of the plans fn's
// statements ran with that did more work than Bound(batch). It fails too
// when fn ran no statement worth a plan. It returns the plans.
func Linear(t testing.TB, ctx context.Context, url, what string, batch int, fn func(conn *pgx.Conn) error) []Plan {
	t.Helper()
	rec, err := Record(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	if err := fn(rec.Conn); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	plans, err := rec.Take()
	if err != nil {
		t.Fatal(err)
	}
	if len(plans) == 0 {
		t.Fatalf("%s: no plan recorded", what)
	}
	for _, e := range Check(plans, batch) {
		t.Errorf("%s, batch %d, cold statistics: %s", what, batch, e)
	}
	for _, p := range plans {
		t.Logf("%s: plan %s", what, Compact(p))
	}
	return plans
}

// Tables are the cold rows a test starts from: deliveries as Deliveries
// seeds them (stuck and acked), events as Events does (present and
// missing). A table given no rows is left as the migrations made it.
type Tables struct {
	Stuck, Acked     int
	Present, Missing int
}

// Cold is a fresh database whose tables hold tables' rows, fresh from
// mass UPDATEs that nothing analysed (it fails t unless the planner has
// no statistics of them), and a context that bounds the test at two
// minutes.
func Cold(t testing.TB, tables Tables) (*testdb.DB, context.Context) {
	t.Helper()
	db := testdb.New(t)
	ctx := testenv.Context(t, 2*time.Minute)
	var seeded []string
	if tables.Stuck+tables.Acked > 0 {
		if err := Deliveries(ctx, db.Pool, db.Schema, tables.Stuck, tables.Acked); err != nil {
			t.Fatal(err)
		}
		seeded = append(seeded, db.Schema.Table("deliveries"))
	}
	if tables.Present+tables.Missing > 0 {
		if err := Events(ctx, db.Pool, db.Schema, tables.Present, tables.Missing); err != nil {
			t.Fatal(err)
		}
		seeded = append(seeded, db.Schema.Table("events"))
	}
	if err := NeverAnalysed(ctx, db.Pool, seeded...); err != nil {
		t.Fatal(err)
	}
	return db, ctx
}

// Statement is one statement a test runs on cold tables: What names it
// in the messages, Batch bounds the work of every node of its plans, and
// Run sends it through q (the recording connection behind pass.Bounded,
// as a pass sends it), checks what it did and returns its error.
type Statement struct {
	What  string
	Batch int
	Run   func(q *pass.Bounded) error
}

// Statements runs each statement in order on db through Linear: each
// sees what the ones before it did.
func Statements(t testing.TB, ctx context.Context, db *testdb.DB, stmts ...Statement) {
	t.Helper()
	for _, s := range stmts {
		Linear(t, ctx, db.DirectURL, s.What, s.Batch, func(conn *pgx.Conn) error { return s.Run(Bounded(conn)) })
	}
}

// Sequences are n sequences from first on: the missing ones a
// placeholder insert writes.
func Sequences(first int64, n int) []int64 {
	return testdb.Span(first, first+int64(n)-1)
}

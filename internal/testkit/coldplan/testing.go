package coldplan

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
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

// ColdEvents seeds the events table of schema as Events does and fails t
// unless the table is left with no planner statistics.
func ColdEvents(t testing.TB, ctx context.Context, q Querier, schema store.Schema, present, missing int) {
	t.Helper()
	if err := Events(ctx, q, schema, present, missing); err != nil {
		t.Fatal(err)
	}
	if err := NeverAnalysed(ctx, q, schema.Table("events")); err != nil {
		t.Fatal(err)
	}
}

package sweep

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

// nopDB satisfies store.Querier for construction-only tests; it is never
// queried.
type nopDB struct{}

func (nopDB) Exec(context.Context, string, ...any) (pgconn.CommandTag, error) {
	panic("not queried")
}
func (nopDB) Query(context.Context, string, ...any) (pgx.Rows, error) { panic("not queried") }
func (nopDB) QueryRow(context.Context, string, ...any) pgx.Row        { panic("not queried") }

func TestNewValidates(t *testing.T) {
	t.Parallel()
	ok := DefaultConfig()
	if _, err := New(nopDB{}, ok); err != nil {
		t.Fatalf("defaults refused: %v", err)
	}
	zero := ok
	zero.StuckAfter, zero.MaxRedeliveries = 0, 0 // both meaningful: "anything delivered before now", "never dead"
	if _, err := New(nopDB{}, zero); err != nil {
		t.Fatalf("zero threshold / zero max refused: %v", err)
	}
	bad := map[string]func(*Config){
		"negative stuck":     func(c *Config) { c.StuckAfter = -time.Second },
		"zero batch":         func(c *Config) { c.BatchLimit = 0 },
		"negative max":       func(c *Config) { c.MaxRedeliveries = -1 },
		"zero budget":        func(c *Config) { c.PassBudget = 0 },
		"bad schema":         func(c *Config) { c.Schema = "Robert'); DROP" },
		"reserved pg schema": func(c *Config) { c.Schema = "pg_catalog" },
	}
	for name, mut := range bad {
		c := ok
		mut(&c)
		if _, err := New(nopDB{}, c); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := New(nil, ok); err == nil {
		t.Error("nil database accepted")
	}
}

func TestDefaultConfigMatchesDesign(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	want := config.Sweep{StuckAfter: 60 * time.Second, BatchLimit: 1000, MaxRedeliveries: 10, PassBudget: 20 * time.Second}
	if c.Sweep != want || c.Schema != "outbox" {
		t.Fatalf("DefaultConfig() = %+v, want %+v in schema outbox", c, want)
	}
}

func TestShouldWake(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reset, dead, stuck int64
		want               bool
	}{
		{0, 0, 0, false},
		{1, 0, 0, true},
		{0, 1, 0, true},
		{0, 0, 1, true},
		{5, 2, 7, true},
	}
	for _, c := range cases {
		if got := shouldWake(c.reset, c.dead, c.stuck); got != c.want {
			t.Errorf("shouldWake(%d,%d,%d) = %v, want %v", c.reset, c.dead, c.stuck, got, c.want)
		}
	}
}

func TestBudgetLeft(t *testing.T) {
	t.Parallel()
	if !budgetLeft(0, time.Second) {
		t.Error("fresh pass with budget refused")
	}
	if budgetLeft(0, 0) {
		t.Error("zero budget allowed a batch")
	}
	if budgetLeft(time.Second, time.Second) {
		t.Error("spent budget allowed a batch")
	}
}

func TestPassMetrics(t *testing.T) {
	t.Parallel()
	names := func(r Result) map[string]float64 {
		m := map[string]float64{}
		for _, v := range passMetrics(r) {
			m[v.Name] = v.Value
		}
		return m
	}
	full := names(Result{Reset: 3, Dead: 1, Open: 9, OldestOpenAgeS: 12.5, DurationMs: 40, counted: true})
	want := map[string]float64{"SweepRuns": 1, "Redeliveries": 3, "DeadLettered": 1, "OpenDeliveries": 9, "OldestOpenAgeSeconds": 12.5, "PassDurationMs": 40}
	for k, v := range want {
		if got, ok := full[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	// A pass that failed before counting must not report a false zero gauge.
	partial := names(Result{Reset: 2})
	if _, ok := partial["OpenDeliveries"]; ok {
		t.Error("OpenDeliveries emitted without a count")
	}
	if partial["Redeliveries"] != 2 || partial["SweepRuns"] != 1 {
		t.Errorf("partial metrics = %v", partial)
	}
}

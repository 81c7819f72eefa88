package prune

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/settingtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

func TestZeroConfigIsTheDefaults(t *testing.T) {
	t.Parallel()
	settingtest.Defaults(t, Config{}.WithDefaults(), Config{Schema: "outbox", AckedAfter: 24 * time.Hour, DeadAfter: 168 * time.Hour, EventsAfter: pass.Off,
		BatchLimit: 5000, PassBudget: 20 * time.Second})
}

func TestNewAcceptsTheDefaultsAndKeep(t *testing.T) {
	t.Parallel()
	settingtest.Accepts(t, testdb.NopDB{}, map[string]Config{
		"the defaults": {},
		"pass.Off":     {AckedAfter: pass.Off, DeadAfter: pass.Off, EventsAfter: pass.Off},
	}, New, Options{})
}

func TestNewRefusesEachBadSettingByName(t *testing.T) {
	t.Parallel()
	bad := map[string]Config{
		"AckedAfter":  {AckedAfter: 500 * time.Millisecond},
		"DeadAfter":   {DeadAfter: -2},
		"EventsAfter": {EventsAfter: time.Millisecond},
		"BatchLimit":  {BatchLimit: 100_001},
		"PassBudget":  {PassBudget: 50 * time.Millisecond},
		"Schema":      {Schema: "Robert'); DROP"},
	}
	settingtest.Refuses(t, testdb.NopDB{}, bad, New, Options{})
}

// A cursor that a batch did not move ends its table, whatever the batch
// said: a pass can never loop on one spot.
func TestCursorEndsWhenItDoesNotMove(t *testing.T) {
	t.Parallel()
	c := newCursor(true)
	c.move(500, false)
	if !c.active || c.at != 500 {
		t.Fatalf("after a full batch: %+v, want active at 500", c)
	}
	c.move(500, false)
	if c.active {
		t.Errorf("a batch that did not move left the cursor active")
	}
	d := newCursor(true)
	d.move(10, true)
	if d.active {
		t.Errorf("a done batch left the cursor active")
	}
}

func TestDeliveriesArePrunedUnlessBothKept(t *testing.T) {
	t.Parallel()
	if !prunesDeliveries(Config{}.WithDefaults()) {
		t.Error("the defaults prune no deliveries")
	}
	if !prunesDeliveries(Config{DeadAfter: pass.Off}.WithDefaults()) {
		t.Error("dead kept: acked deliveries not pruned")
	}
	if prunesDeliveries(Config{AckedAfter: pass.Off, DeadAfter: pass.Off}.WithDefaults()) {
		t.Error("both kept: deliveries still pruned")
	}
}

func TestMetricsCarryThePassFigures(t *testing.T) {
	t.Parallel()
	r := &Result{DeletedDeliveries: 7, DeletedEvents: 3, Summary: pass.Summary{Statements: 4, DurationMS: 12}}
	got := map[string]float64{}
	for _, m := range r.Metrics() {
		got[m.Name] = m.Value
	}
	want := map[string]float64{"PruneRuns": 1, "DeletedDeliveries": 7, "DeletedEvents": 3, "Statements": 4, "PassDurationMs": 12}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
}

func TestKeptForConsumerOnlyWhenItBounds(t *testing.T) {
	t.Parallel()
	var r Result
	r.bound(store.PruneBound{Watermark: 100, Slowest: &store.ConsumerPosition{Name: "fast", Position: 150}})
	if r.KeptForConsumer != nil {
		t.Errorf("a consumer past the watermark is named: %q", *r.KeptForConsumer)
	}
	if *r.EventsUpto != 100 {
		t.Errorf("events_upto = %d, want the watermark 100", *r.EventsUpto)
	}
	r.bound(store.PruneBound{Watermark: 100, Slowest: &store.ConsumerPosition{Name: "slow", Position: 40}})
	if r.KeptForConsumer == nil || *r.KeptForConsumer != "slow" {
		t.Errorf("kept_for_consumer = %v, want slow", r.KeptForConsumer)
	}
	if *r.EventsUpto != 40 {
		t.Errorf("events_upto = %d, want 40", *r.EventsUpto)
	}
}

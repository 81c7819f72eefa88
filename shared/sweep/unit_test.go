package sweep

import (
	"fmt"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/settingtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

func TestZeroConfigIsTheDefaults(t *testing.T) {
	t.Parallel()
	settingtest.Defaults(t, Config{}.WithDefaults(), Config{Schema: "outbox", StuckAfter: 60 * time.Second, BatchLimit: 1000, MaxRedeliveries: 10, PassBudget: 20 * time.Second})
}

func TestNewAcceptsTheDefaultsAndNeverDead(t *testing.T) {
	t.Parallel()
	settingtest.Accepts(t, testdb.NopDB{}, map[string]Config{
		"the defaults":          {},
		"pass.Off (never dead)": {MaxRedeliveries: pass.Off},
	}, New, Options{})
}

func TestNewRefusesEachBadSettingByName(t *testing.T) {
	t.Parallel()
	bad := map[string]Config{
		"StuckAfter":      {StuckAfter: 500 * time.Millisecond},
		"BatchLimit":      {BatchLimit: -1},
		"MaxRedeliveries": {MaxRedeliveries: -2},
		"PassBudget":      {PassBudget: -1},
		"Schema":          {Schema: "Robert'); DROP"},
	}
	settingtest.Refuses(t, testdb.NopDB{}, bad, New, Options{})
}

func TestWakeOnAnyResetDeathOrStuckPendingRow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reset, dead, stuckPending int64
		want                      bool
	}{
		{0, 0, 0, false},
		{1, 0, 0, true},
		{0, 1, 0, true},
		{0, 0, 1, true},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("reset %d dead %d stuck pending %d", c.reset, c.dead, c.stuckPending), func(t *testing.T) {
			if got := shouldWake(c.reset, c.dead, c.stuckPending); got != c.want {
				t.Errorf("shouldWake = %v, want %v", got, c.want)
			}
		})
	}
}

func TestMetricsLeaveOutGaugesNeverRead(t *testing.T) {
	t.Parallel()
	names := func(r *Result) map[string]bool {
		out := map[string]bool{}
		for _, m := range r.Metrics() {
			out[m.Name] = true
		}
		return out
	}
	uncounted, counted := names(&Result{}), names(&Result{counted: true})
	for _, gauge := range []string{"OpenDeliveries", "OldestOpenAgeSeconds"} {
		if uncounted[gauge] {
			t.Errorf("a pass that never counted open work emits %s: %v", gauge, uncounted)
		}
		if !counted[gauge] {
			t.Errorf("a pass that counted open work does not emit %s: %v", gauge, counted)
		}
	}
	if got := names(&Result{}); !got["SweepRuns"] {
		t.Error("SweepRuns is missing: the silence alarm counts passes by it")
	}
}

func TestMetricsCarryThePassFigures(t *testing.T) {
	t.Parallel()
	got := map[string]float64{}
	for _, m := range (&Result{Reset: 3, Dead: 1, Open: 9, OldestOpenAgeS: 12.5, Summary: pass.Summary{DurationMS: 40}, counted: true}).Metrics() {
		got[m.Name] = m.Value
	}
	want := map[string]float64{"SweepRuns": 1, "Redeliveries": 3, "DeadLettered": 1, "OpenDeliveries": 9, "OldestOpenAgeSeconds": 12.5, "PassDurationMs": 40}
	for name, v := range want {
		if got[name] != v {
			t.Errorf("%s = %v, want %v", name, got[name], v)
		}
	}
}

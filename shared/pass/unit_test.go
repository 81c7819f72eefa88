package pass

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/setting"
)

func TestLeaseLastsFourTicksAndAtLeastASecond(t *testing.T) {
	t.Parallel()
	cases := []struct {
		tick, want time.Duration
	}{
		{500 * time.Millisecond, 2 * time.Second},
		{time.Second, 4 * time.Second},
		{50 * time.Millisecond, time.Second},
	}
	for _, c := range cases {
		t.Run(c.tick.String(), func(t *testing.T) {
			if got := LeaseTTL(c.tick); got != c.want {
				t.Errorf("LeaseTTL(%s) = %s, want %s", c.tick, got, c.want)
			}
		})
	}
}

func TestAckWindowIsATickAndAPollAtLeast(t *testing.T) {
	t.Parallel()
	if got, want := AckWindow(500*time.Millisecond), 500*time.Millisecond+LeasePoll; got != want {
		t.Errorf("AckWindow(500ms) = %s, want %s", got, want)
	}
	if got, want := AckWindow(10*time.Millisecond), MinAck+LeasePoll; got != want {
		t.Errorf("AckWindow(10ms) = %s, want %s: never under the floor", got, want)
	}
}

// fixedClock is a clock the test moves.
type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time { return c.t }

func TestNoStatementStartsOnceTheBudgetIsSpent(t *testing.T) {
	t.Parallel()
	clk := &fixedClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	b := NewBudget(context.Background(), time.Second, clk.Now)
	if !b.TimeLeft() {
		t.Error("a fresh pass with budget left may start a statement")
	}
	clk.t = clk.t.Add(time.Second)
	if b.TimeLeft() {
		t.Error("at the budget, no statement may start")
	}
	if NewBudget(context.Background(), 0, clk.Now).TimeLeft() {
		t.Error("a zero budget allows no statement")
	}
	if got := b.HardEnd.Sub(b.End); got != FinishAllowance {
		t.Errorf("the hard end is %s after the end, want the finish allowance %s", got, FinishAllowance)
	}
}

func TestPauseRefusesToSleepPastTheEnd(t *testing.T) {
	t.Parallel()
	b := NewBudget(context.Background(), 200*time.Millisecond, time.Now)
	if b.Pause(context.Background(), time.Second) {
		t.Error("a pause past the budget's end slept")
	}
	if !b.Pause(context.Background(), time.Millisecond) {
		t.Error("a pause well inside the budget refused")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if b.Pause(ctx, time.Millisecond) {
		t.Error("a pause on a cancelled context slept")
	}
}

func TestBoundsDefaultAndRefuseByName(t *testing.T) {
	t.Parallel()
	type cfg struct {
		Limit int
		Wait  time.Duration
		Tick  time.Duration
	}
	bounds := []Bound{
		Int("Limit", "LIMIT", 10, Ints(1, 100)),
		Dur("Wait", "WAIT", 2*time.Second, Durations(time.Second, 12*time.Hour)).InWhole(time.Second).OrOff("none"),
		PassBudget("TICK", 20*time.Second),
	}
	bounds[2].Field = "Tick"
	if got := WithDefaults(cfg{}, bounds); got != (cfg{10, 2 * time.Second, 20 * time.Second}) {
		t.Fatalf("WithDefaults(zero) = %+v", got)
	}
	cases := []struct {
		name  string
		c     cfg
		field string // "" when accepted
	}{
		{"defaults", cfg{10, 2 * time.Second, 20 * time.Second}, ""},
		{"off where allowed", cfg{10, Off, 20 * time.Second}, ""},
		{"off where refused", cfg{Off, time.Second, 20 * time.Second}, "Limit"},
		{"above the maximum", cfg{101, time.Second, 20 * time.Second}, "Limit"},
		{"not whole seconds", cfg{10, 1500 * time.Millisecond, 20 * time.Second}, "Wait"},
		{"budget under 100ms", cfg{10, time.Second, 50 * time.Millisecond}, "Tick"},
		{"budget over 15m", cfg{10, time.Second, 16 * time.Minute}, "Tick"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Validate("test", c.c, bounds)
			if c.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var se *setting.Error
			if !errors.As(err, &se) || se.Field != c.field {
				t.Fatalf("err = %v, want a *setting.Error naming %s", err, c.field)
			}
		})
	}
	type withSchema struct {
		Schema string
		Limit  int
	}
	if got := WithDefaults(withSchema{}, bounds[:1]); got.Schema != "outbox" || got.Limit != 10 {
		t.Errorf("WithDefaults(zero) = %+v, want the default schema and limit", got)
	}
	if err := Validate("test", withSchema{Schema: "Robert'); DROP"}, bounds[:1]); err == nil {
		t.Error("a schema that is no plain identifier was accepted")
	}
}

func TestBoundReasonStatesTheRange(t *testing.T) {
	t.Parallel()
	cases := []struct {
		b    Bound
		want string
	}{
		{PassBudget("X", time.Second), "must be 100ms to 15m (Lambda's longest timeout)"},
		{Dur("StuckAfter", "X", time.Minute, AtLeast(time.Second)), "must be at least 1s"},
		{Int("N", "X", 10, Ints(1, 1_000_000)).OrOff("never dead"), "must be 1 to 1000000, or 0 for never dead"},
		{Dur("Defer", "X", time.Second, Durations(time.Second, 12*time.Hour)).InWhole(time.Second).Because("SQS"), "must be whole seconds, 1s to 12h (SQS)"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			if got := c.b.Reason(); got != c.want {
				t.Errorf("Reason() = %q, want %q", got, c.want)
			}
		})
	}
}

func TestRunCloseNamesThePassOnceAndAbsorbsTheBudget(t *testing.T) {
	t.Parallel()
	k := &Kit{Name: "sweep", Options: Options{}.WithDefaults("sweep")}
	cases := []struct {
		name      string
		err       error
		wantErr   string
		wantTimed bool
	}{
		{"no error", nil, "", false},
		{"a statement the budget ended", &BudgetError{Err: errors.New("canceling statement due to statement timeout")}, "", true},
		{"a statement never sent", &BudgetError{Err: ErrNotSent}, "", false},
		{"a database error", fmt.Errorf("batch 2: %w", errors.New("boom")), "sweep: batch 2: boom", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := k.Begin(context.Background())
			var sum Summary
			err := r.Close(&sum, c.err)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != c.wantErr || sum.Error != c.wantErr {
				t.Errorf("error %q, summary %q; want %q", got, sum.Error, c.wantErr)
			}
			if (sum.TimedOut != "") != c.wantTimed {
				t.Errorf("TimedOut = %q, want set: %v", sum.TimedOut, c.wantTimed)
			}
			if lvl := sum.Level(err); (lvl == slog.LevelWarn) != c.wantTimed {
				t.Errorf("level %v for a timed-out %v", lvl, c.wantTimed)
			}
		})
	}
}

package pass

import (
	"context"
	"time"
)

// Margin is kept back from the Lambda deadline: the pass's last
// statements, its log line and its metrics all land before it.
const Margin = 2 * time.Second

// FinishAllowance is how long after the budget's end the last statements
// (the state, the lease) may take, inside Margin.
const FinishAllowance = time.Second

// stepReserve is kept back from the budget's end after a pause: a step's
// statements take a few milliseconds (more through a pooler), and one
// begun with less left would end on a statement it had no time to send.
const stepReserve = 50 * time.Millisecond

// For returns how long a pass may run, starting at now:
// min(configured, Lambda deadline − Margin). A context without a deadline
// (tests, local tools) gets the configured budget.
func For(ctx context.Context, configured time.Duration, now time.Time) time.Duration {
	d := configured
	if deadline, ok := ctx.Deadline(); ok {
		if left := deadline.Sub(now) - Margin; left < d {
			d = left
		}
	}
	return max(d, 0)
}

// Budget is one pass's time: every statement of its work ends by End, its
// last statements by HardEnd.
type Budget struct {
	Start, End, HardEnd time.Time
	now                 func() time.Time
}

// NewBudget starts a budget of For(ctx, configured, now()) at now().
func NewBudget(ctx context.Context, configured time.Duration, now func() time.Time) Budget {
	start := now()
	end := start.Add(For(ctx, configured, start))
	return Budget{Start: start, End: end, HardEnd: end.Add(FinishAllowance), now: now}
}

// Left is the time until End, never negative.
func (b Budget) Left() time.Duration { return max(b.End.Sub(b.now()), 0) }

// TimeLeft says another statement may start: End is not reached.
func (b Budget) TimeLeft() bool { return b.now().Before(b.End) }

// Elapsed is the time since Start.
func (b Budget) Elapsed() time.Duration { return b.now().Sub(b.Start) }

// Pause sleeps d, and says false instead when d would reach the budget's
// end (less a step's reserve) or ctx ends: the pass then ends with what it
// has, rather than wake to send a statement with no time left.
func (b Budget) Pause(ctx context.Context, d time.Duration) bool {
	if !b.now().Add(d + stepReserve).Before(b.End) {
		return false
	}
	return Sleep(ctx, d) == nil
}

// Sleep waits d or until ctx ends, whichever is first, so a cancelled
// invocation stops at once.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Package budget bounds one scheduled pass: min(configured budget, Lambda
// deadline - 2s). The 2s margin leaves time to write the result, the log
// line and the metrics before Lambda cuts the invocation off.
package budget

import (
	"context"
	"time"
)

// Margin is kept back from the Lambda deadline.
const Margin = 2 * time.Second

// For returns how long the pass may run, starting at now. A context without
// a deadline (tests, local tools) gets the configured budget.
func For(ctx context.Context, configured time.Duration, now time.Time) time.Duration {
	d := configured
	if deadline, ok := ctx.Deadline(); ok {
		if left := deadline.Sub(now) - Margin; left < d {
			d = left
		}
	}
	if d < 0 {
		d = 0
	}
	return d
}

// Sleep waits d or until ctx ends, whichever is first: the passes wait out
// graces, proof polls and retry intervals this way so a cancelled
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

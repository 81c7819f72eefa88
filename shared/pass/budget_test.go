package pass

import (
	"context"
	"testing"
	"time"
)

func TestForKeepsTheMarginBeforeTheDeadline(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		deadline   time.Duration // 0: none
		configured time.Duration
		want       time.Duration
	}{
		{"no deadline uses the configured budget", 0, 20 * time.Second, 20 * time.Second},
		{"far deadline uses the configured budget", time.Minute, 20 * time.Second, 20 * time.Second},
		{"near deadline keeps the margin", 10 * time.Second, 20 * time.Second, 8 * time.Second},
		{"deadline inside the margin gives nothing", time.Second, 20 * time.Second, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, now.Add(c.deadline))
				defer cancel()
			}
			if got := For(ctx, c.configured, now); got != c.want {
				t.Fatalf("For = %s, want %s", got, c.want)
			}
		})
	}
}

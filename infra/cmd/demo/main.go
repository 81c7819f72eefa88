// Command demo is `make demo`: it runs outboxkeeper end to end on this
// machine — the three functions' real bootstraps under aws-lambda-rie,
// driven as EventBridge and the SQS event source mapping would drive them —
// under a workload of publishers, the deliver function pushing to a queue
// and a webhook served here, and a consumer, then judges the
// result and exits non-zero when any check fails.
//
// Environment (besides .local/stack.env):
//
//	DEMO_DURATION    how long the publishers run (default 60s)
//	DEMO_SCHEDULE    invoke fill and sweep this often instead of on the
//	                 template's schedules (a quicker look; the output says so)
//	DEMO_DRAIN       the longest wait for everything to settle (default 150s:
//	                 a lost ack waits SWEEP_STUCK_AFTER, then the next sweep)
//	DEMO_HOLD        how long the long transaction stays open (default 6s;
//	                 0 holds none, so no transaction older than a marker is
//	                 ever open: the latencies then show the fill's own bound)
//	DEMO_PUBLISHERS  publisher goroutines (default 4)
//	DEMO_DATABASE    database created anew on the stack's server (default outboxkeeper_demo)
//	DEMO_SUMMARY     also write the verdict and the latencies as JSON to this
//	                 file (make bench reads it for BENCHMARKS.md)
//
// The functions run with the template's settings (its schedules, timeouts,
// memory, concurrency and parameter defaults); FILL_*, SWEEP_* and
// COMPENSATE_* set here override them, and the output lists them.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
)

func main() {
	cfg, err := loadConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(2)
	}
	// Ctrl-C or SIGTERM cancels the context; every rie, goroutine and pool
	// started by run is stopped by its deferred cleanup before we exit.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ok, err := run(ctx, cfg, os.Stdout, local.NewStatusLine(os.Stdout))
	switch {
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(os.Stderr, "demo: interrupted; everything it started is stopped")
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	case !ok:
		fmt.Fprintln(os.Stderr, "demo: FAILED")
		os.Exit(1)
	}
	fmt.Println("demo: all checks passed")
}

func loadConfig() (demoConfig, error) {
	cfg := demoConfig{
		Duration: 60 * time.Second, Drain: 150 * time.Second,
		Hold: 6 * time.Second, HoldEvery: 15 * time.Second, Publishers: 4,
		Database: "outboxkeeper_demo",
	}
	for name, dst := range map[string]*time.Duration{
		"DEMO_DURATION": &cfg.Duration, "DEMO_SCHEDULE": &cfg.Schedule,
		"DEMO_DRAIN": &cfg.Drain, "DEMO_HOLD": &cfg.Hold,
	} {
		if v, ok := os.LookupEnv(name); ok {
			d, err := time.ParseDuration(v)
			// Only the hold may be zero: none at all.
			if err != nil || d < 0 || d == 0 && name != "DEMO_HOLD" {
				return cfg, fmt.Errorf("%s=%q: want a positive Go duration such as 30s", name, v)
			}
			*dst = d
		}
	}
	cfg.Summary = os.Getenv("DEMO_SUMMARY")
	if v, ok := os.LookupEnv("DEMO_PUBLISHERS"); ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 64 {
			return cfg, fmt.Errorf("DEMO_PUBLISHERS=%q: want 1..64", v)
		}
		cfg.Publishers = n
	}
	if v, ok := os.LookupEnv("DEMO_DATABASE"); ok {
		cfg.Database = v
	}
	return cfg, nil
}

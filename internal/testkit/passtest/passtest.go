// Package passtest builds the pass functions' Services the way the tests
// of other packages need them (the CLI's, the migrations'): on a test's
// pool, logs and metrics discarded, and runs one pass, failing the test on
// an error. A pass package's external tests build theirs with Built.
package passtest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// Options are a pass's options with its logs and metrics discarded.
func Options(function string) pass.Options {
	return pass.Options{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: &metrics.Emitter{Function: function, Out: io.Discard}}
}

// Built fails the test with a constructor's error, or returns what it
// built: passtest.Built(sweep.New(db, cfg, opts))(t).
func Built[S any](s S, err error) func(testing.TB) S {
	return func(t testing.TB) S {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// Fill is a bounded fill with no grace (the tests make their stalls on
// purpose) whose pass lasts at most budget, ticking every 50ms.
func Fill(t testing.TB, db pass.DB, budget time.Duration) *fill.Service {
	t.Helper()
	return Built(fill.New(db, fill.Config{Grace: pass.Off, Bounded: true, PassBudget: budget, Tick: 50 * time.Millisecond},
		fill.Options{Options: Options("fill")}))(t)
}

// Sweep is a sweep with cfg.
func Sweep(t testing.TB, db pass.DB, cfg sweep.Config) *sweep.Service {
	t.Helper()
	return Built(sweep.New(db, cfg, sweep.Options{Options: Options("sweep")}))(t)
}

// Prune is a prune with cfg.
func Prune(t testing.TB, db pass.DB, cfg prune.Config) *prune.Service {
	t.Helper()
	return Built(prune.New(db, cfg, prune.Options{Options: Options("prune")}))(t)
}

// Compensate is compensate with cfg, on the stack's SQS.
func Compensate(t testing.TB, db pass.DB, cfg compensate.Config) *compensate.Service {
	t.Helper()
	return Built(compensate.New(db, cfg, compensate.Options{Options: Options("compensate"), SQS: sqstest.Client(t)}))(t)
}

// Run runs one scheduled pass of s and returns its result, failing the
// test if it errs.
func Run[R any](t testing.TB, ctx context.Context, s interface {
	RunOnce(context.Context, json.RawMessage) (R, error)
}) R {
	t.Helper()
	res, err := s.RunOnce(ctx, nil)
	if err != nil {
		t.Fatalf("%T pass: %v (%+v)", s, err, res)
	}
	return res
}

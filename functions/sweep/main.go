// Command sweep is the sweep Lambda (DESIGN §6): wiring only. The pass
// itself is shared/sweep.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/logging"
	"github.com/outboxkeeper/outboxkeeper/shared/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

func main() {
	log := logging.Setup()
	env := config.Environment()
	db, err := config.LoadDatabase(env)
	if err != nil {
		logging.InitFailed(log, "sweep", "load database configuration", err)
	}
	cfg, err := config.LoadSweep(env)
	if err != nil {
		logging.InitFailed(log, "sweep", "load sweep configuration", err)
	}
	// The pool outlives invocations of a warm environment; it dials lazily.
	pool, err := pg.NewPool(context.Background(), db, pg.Options{ApplicationName: "outboxkeeper-sweep"})
	if err != nil {
		logging.InitFailed(log, "sweep", "open database pool", err)
	}
	sw, err := sweep.New(pool, sweep.Config{Sweep: cfg, Schema: db.Schema})
	if err != nil {
		logging.InitFailed(log, "sweep", "build sweeper", err)
	}
	h := &sweep.Handler{Sweeper: sw, Log: log, Metrics: metrics.New("sweep")}
	lambda.Start(h.Handle)
}

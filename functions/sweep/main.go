// Command sweep is the sweep Lambda function: on a schedule, one pass that
// puts deliveries pushed but never acknowledged back to pending (or dead)
// and wakes the relay. Wiring only; the logic is shared/sweep.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	migrations "github.com/outboxkeeper/outboxkeeper/infra/sql"
	"github.com/outboxkeeper/outboxkeeper/internal/logging"
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

func main() {
	logger := logging.Setup()
	env := config.Environment()
	dbConfig, err := config.LoadDatabase(env)
	if err != nil {
		logging.InitFailed(logger, "sweep", "load database configuration", err)
	}
	sweepConfig, err := config.Load[sweep.Config](env)
	if err != nil {
		logging.InitFailed(logger, "sweep", "load sweep configuration", err)
	}
	stack, err := config.LoadStack(env)
	if err != nil {
		logging.InitFailed(logger, "sweep", "load the stack name", err)
	}
	// The pool outlives invocations of a warm environment; the version
	// check below makes its first connection.
	pool, err := pg.NewPool(context.Background(), dbConfig, pg.Options{ApplicationName: "outboxkeeper-sweep"})
	if err != nil {
		logging.InitFailed(logger, "sweep", "open database pool", err)
	}
	// A database behind this build (or ahead of it, unless marked
	// compatible) fails the init naming both versions, before any pass.
	if err := migrations.Check(context.Background(), pool, dbConfig.Schema); err != nil {
		logging.InitFailed(logger, "sweep", "check the schema version", err)
	}
	svc, err := sweep.New(pool, sweepConfig, sweep.Options{Logger: logger, Metrics: &metrics.Emitter{Function: "sweep", Stack: stack}})
	if err != nil {
		logging.InitFailed(logger, "sweep", "build sweep service", err)
	}
	lambda.Start(svc.Handle)
}

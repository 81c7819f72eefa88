// Command prune is the prune Lambda function: on a schedule, one retention
// pass that deletes acked and dead deliveries and old events, never past
// a registered consumer. Wiring only; the logic is shared/prune.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	migrations "github.com/outboxkeeper/outboxkeeper/infra/sql"
	"github.com/outboxkeeper/outboxkeeper/internal/logging"
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
)

func main() {
	logger := logging.Setup()
	env := config.Environment()
	dbConfig, err := config.LoadDatabase(env)
	if err != nil {
		logging.InitFailed(logger, "prune", "load database configuration", err)
	}
	pruneConfig, err := config.Load[prune.Config](env)
	if err != nil {
		logging.InitFailed(logger, "prune", "load prune configuration", err)
	}
	stack, err := config.LoadStack(env)
	if err != nil {
		logging.InitFailed(logger, "prune", "load the stack name", err)
	}
	// The pool outlives invocations of a warm environment; the version
	// check below makes its first connection.
	pool, err := pg.NewPool(context.Background(), dbConfig, pg.Options{ApplicationName: "outboxkeeper-prune"})
	if err != nil {
		logging.InitFailed(logger, "prune", "open database pool", err)
	}
	// A database behind this build (or ahead of it, unless marked
	// compatible) fails the init naming both versions, before any pass.
	if err := migrations.Check(context.Background(), pool, dbConfig.Schema); err != nil {
		logging.InitFailed(logger, "prune", "check the schema version", err)
	}
	svc, err := prune.New(pool, pruneConfig, prune.Options{Logger: logger, Metrics: &metrics.Emitter{Function: "prune", Stack: stack}})
	if err != nil {
		logging.InitFailed(logger, "prune", "build prune service", err)
	}
	lambda.Start(svc.Handle)
}

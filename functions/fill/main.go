// Command fill is the fill Lambda function: on a schedule, one pass that
// proves and fills abandoned sequence gaps, then watches for new ones until
// its budget ends or the next invocation takes over. Wiring only; the
// logic is shared/fill.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	migrations "github.com/outboxkeeper/outboxkeeper/infra/sql"
	"github.com/outboxkeeper/outboxkeeper/internal/logging"
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

func main() {
	logger := logging.Setup()
	ctx := context.Background()
	env := config.Environment()

	dbConfig, err := config.LoadDatabase(env)
	if err != nil {
		logging.InitFailed(logger, "fill", "load database configuration", err)
	}
	fillConfig, err := config.Load[fill.Config](env)
	if err != nil {
		logging.InitFailed(logger, "fill", "load fill configuration", err)
	}
	stack, err := config.LoadStack(env)
	if err != nil {
		logging.InitFailed(logger, "fill", "load the stack name", err)
	}
	pool, err := pg.NewPool(ctx, dbConfig, pg.Options{ApplicationName: "outboxkeeper-fill"})
	if err != nil {
		logging.InitFailed(logger, "fill", "open database pool", err)
	}
	// A database behind this build (or ahead of it, unless marked
	// compatible) fails the init naming both versions, before any pass.
	if err := migrations.Check(ctx, pool, dbConfig.Schema); err != nil {
		logging.InitFailed(logger, "fill", "check the schema version", err)
	}
	svc, err := fill.New(pool, fillConfig, fill.Options{Logger: logger, Metrics: &metrics.Emitter{Function: "fill", Stack: stack}})
	if err != nil {
		logging.InitFailed(logger, "fill", "build fill service", err)
	}
	lambda.Start(svc.Handle)
}

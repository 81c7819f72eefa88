// Command fill is the fill Lambda function (DESIGN §4): on a schedule, one
// bounded pass that proves and fills abandoned sequence gaps. Wiring only;
// the logic is shared/fill.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/logging"
	"github.com/outboxkeeper/outboxkeeper/shared/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/store"
)

func main() {
	logger := logging.Setup()
	ctx := context.Background()
	env := config.Environment()

	dbConfig, err := config.LoadDatabase(env)
	if err != nil {
		logging.InitFailed(logger, "fill", "load database configuration", err)
	}
	fillConfig, err := config.LoadFill(env)
	if err != nil {
		logging.InitFailed(logger, "fill", "load fill configuration", err)
	}
	schema, err := store.ParseSchema(dbConfig.Schema)
	if err != nil {
		logging.InitFailed(logger, "fill", "schema", err)
	}
	pool, err := pg.NewPool(ctx, dbConfig, pg.Options{ApplicationName: "outboxkeeper-fill"})
	if err != nil {
		logging.InitFailed(logger, "fill", "open database pool", err)
	}
	svc, err := fill.New(pool, schema, fillConfig, fill.Options{Logger: logger, Metrics: metrics.New("fill")})
	if err != nil {
		logging.InitFailed(logger, "fill", "build fill service", err)
	}
	lambda.Start(svc.Handle)
}

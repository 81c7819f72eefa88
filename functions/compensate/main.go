// Command compensate is the compensate Lambda function: it fills the
// sequences that writers report they abandoned, from SQS batches with
// partial batch responses. Wiring only; the logic is shared/compensate.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	migrations "github.com/outboxkeeper/outboxkeeper/infra/sql"
	"github.com/outboxkeeper/outboxkeeper/internal/awsenv"
	"github.com/outboxkeeper/outboxkeeper/internal/logging"
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

func main() {
	log := logging.Setup()
	ctx := context.Background()

	env := config.Environment()
	db, err := config.LoadDatabase(env)
	if err != nil {
		logging.InitFailed(log, "compensate", "load database configuration", err)
	}
	cfg, err := config.Load[compensate.Config](env)
	if err != nil {
		logging.InitFailed(log, "compensate", "load compensate configuration", err)
	}
	// Loaded once for SQS and, in secret or IAM mode, the pool, from
	// Lambda's variables (awsenv), which include AWS_ENDPOINT_URL_SQS: how
	// the local stack points the client at its emulator.
	awsCfg, err := awsenv.Load(ctx)
	if err != nil {
		logging.InitFailed(log, "compensate", "load AWS configuration", err)
	}
	// The pool outlives invocations of a warm environment (the version
	// check below dials its first connection); a connection that broke is
	// discarded and re-dialled by pgxpool.
	pool, err := pg.NewPool(ctx, db, pg.Options{ApplicationName: "outboxkeeper-compensate", AWS: &awsCfg})
	if err != nil {
		logging.InitFailed(log, "compensate", "open database pool", err)
	}
	// A database behind this build (or ahead of it, unless marked
	// compatible) fails the init naming both versions, before any pass.
	if err := migrations.Check(ctx, pool, db.Schema); err != nil {
		logging.InitFailed(log, "compensate", "check the schema version", err)
	}
	svc, err := compensate.New(pool, cfg, compensate.Options{
		SQS:     sqs.NewFromConfig(awsCfg),
		Logger:  log,
		Metrics: metrics.New("compensate"),
	})
	if err != nil {
		logging.InitFailed(log, "compensate", "build compensate service", err)
	}
	lambda.Start(svc.Handle)
}

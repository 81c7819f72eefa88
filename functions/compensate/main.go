// Command compensate is the compensate Lambda function: it fills the
// sequences that writers report they abandoned, from SQS batches with
// partial batch responses. Wiring only; the logic is shared/compensate.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/awsenv"
	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/compensate"
)

func main() {
	init := boot.Start("compensate")
	cfg := boot.Config[compensate.Config](init)
	// Loaded once for SQS and, in secret or IAM mode, the pool, from
	// Lambda's variables (awsenv), which include AWS_ENDPOINT_URL_SQS: how
	// the local stack points the client at its emulator.
	awsCfg, err := awsenv.Load(context.Background())
	init.Must(err, "load AWS configuration")
	pool := init.Database(pg.Options{AWS: &awsCfg})
	svc, err := compensate.New(pool, cfg, compensate.Options{Options: init.PassOptions(), SQS: sqs.NewFromConfig(awsCfg)})
	init.Must(err, "build compensate service")
	lambda.Start(svc.Handle)
}

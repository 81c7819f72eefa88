// Command deliver is the deliver Lambda function: on a schedule, one pass
// that claims pending deliveries, pushes each to its recipient's target
// (an SQS queue, an SNS topic, an EventBridge bus or a signed HTTPS
// webhook) and acks what the target accepted, then watches for more until
// its budget ends or the next invocation takes over. Wiring only; the
// logic is shared/deliver.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/outboxkeeper/outboxkeeper/internal/awsenv"
	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
)

func main() {
	init := boot.Start("deliver")
	cfg := boot.Config[deliver.Config](init)
	awsCfg, err := awsenv.Load(context.Background())
	init.Must(err, "load the AWS configuration")
	pool := init.Database(pg.Options{})
	svc, err := deliver.New(pool, cfg, deliver.Options{AWS: awsCfg, Options: init.PassOptions()})
	init.Must(err, "build deliver service")
	lambda.Start(svc.Handle)
}

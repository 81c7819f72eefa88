// Command sweep is the sweep Lambda function: on a schedule, one pass that
// puts deliveries pushed but never acknowledged back to pending (or dead)
// and wakes the relay. Wiring only; the logic is shared/sweep.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

func main() {
	init := boot.Start("sweep")
	cfg := boot.Config[sweep.Config](init)
	pool := init.Database(pg.Options{})
	svc, err := sweep.New(pool, cfg, sweep.Options{Logger: init.Logger, Metrics: init.Metrics()})
	init.Must(err, "build sweep service")
	lambda.Start(svc.Handle)
}

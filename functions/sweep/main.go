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
	svc, err := sweep.New(init.Database(pg.Options{}), cfg, sweep.Options{Options: init.PassOptions()})
	init.Must(err, "build sweep service")
	lambda.Start(svc.Handle)
}

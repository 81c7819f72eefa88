// Command prune is the prune Lambda function: on a schedule, one retention
// pass that deletes acked and dead deliveries and old events, never past
// a registered consumer. Wiring only; the logic is shared/prune.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
)

func main() {
	init := boot.Start("prune")
	cfg := boot.Config[prune.Config](init)
	svc, err := prune.New(init.Database(pg.Options{}), cfg, prune.Options{Options: init.PassOptions()})
	init.Must(err, "build prune service")
	lambda.Start(svc.Handle)
}

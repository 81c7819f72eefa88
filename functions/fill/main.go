// Command fill is the fill Lambda function: on a schedule, one pass that
// proves and fills abandoned sequence gaps, then watches for new ones until
// its budget ends or the next invocation takes over. Wiring only; the
// logic is shared/fill.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

func main() {
	init := boot.Start("fill")
	cfg := boot.Config[fill.Config](init)
	svc, err := fill.New(init.Database(pg.Options{}), cfg, fill.Options{Options: init.PassOptions()})
	init.Must(err, "build fill service")
	lambda.Start(svc.Handle)
}

// Command deliver is the deliver Lambda function: on a schedule, one pass
// that claims pending deliveries, pushes each to its recipient's target
// (an SQS queue, an SNS topic, an EventBridge bus or a signed HTTPS
// webhook) and acks what the target accepted, then watches for more until
// its budget ends or the next invocation takes over. Wiring only; the
// logic is shared/deliver.
package main

import (
	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/deliver"
)

func main() {
	boot.Serve("deliver", func(in *boot.Init, cfg deliver.Config) (boot.Service, error) {
		aws := in.AWS() // one load serves the pool's login and the target's client
		return deliver.New(in.Database(pg.Options{AWS: &aws}), cfg, deliver.Options{AWS: aws, Options: in.PassOptions()})
	})
}

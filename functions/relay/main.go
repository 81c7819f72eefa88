// Command relay is the relay Lambda function: on a schedule, one pass that
// sends the committed events of its topics to its target (RELAY_TARGET),
// in order within each group, then watches for new ones until its budget
// ends or the next invocation takes over. Wiring only; the logic is
// shared/relay.
package main

import (
	"context"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/outboxkeeper/outboxkeeper/internal/awsenv"
	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/relay"
)

func main() {
	init := boot.Start("relay")
	cfg := boot.Config[relay.Config](init)
	awsCfg, err := awsenv.Load(context.Background())
	init.Must(err, "load the AWS configuration")
	pool := init.Database(pg.Options{})
	// The metrics' Function dimension names the relay (relay:<RELAY_NAME>,
	// as its consumer and its lease), so two relays of one stack keep their
	// figures, and their alarms, apart.
	opts := init.PassOptions()
	opts.Metrics.Function = relay.ConsumerName(cfg.Name)
	svc, err := relay.New(pool, cfg, relay.Options{AWS: awsCfg, Options: opts})
	init.Must(err, "build relay service")
	lambda.Start(svc.Handle)
}

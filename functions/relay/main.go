// Command relay is the relay Lambda function: on a schedule, one pass that
// sends the committed events of its topics to its target (RELAY_TARGET),
// in order within each group, then watches for new ones until its budget
// ends or the next invocation takes over. Wiring only; the logic is
// shared/relay.
package main

import (
	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/relay"
)

func main() {
	boot.Serve("relay", func(in *boot.Init, cfg relay.Config) (boot.Service, error) {
		// The metrics' Function dimension names the relay (relay:<RELAY_NAME>,
		// as its consumer and its lease), so two relays of one stack keep
		// their figures, and their alarms, apart.
		opts := in.PassOptions()
		opts.Metrics.Function = relay.ConsumerName(cfg.Name)
		aws := in.AWS() // one load serves the pool's login and the target's client
		return relay.New(in.Database(pg.Options{AWS: &aws}), cfg, relay.Options{AWS: aws, Options: opts})
	})
}

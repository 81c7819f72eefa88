// Command prune is the prune Lambda function: on a schedule, one retention
// pass that deletes acked and dead deliveries and old events, never past
// a registered consumer. Wiring only; the logic is shared/prune.
package main

import (
	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
)

func main() {
	boot.Serve("prune", func(in *boot.Init, cfg prune.Config) (boot.Service, error) {
		return prune.New(in.Database(pg.Options{}), cfg, prune.Options{Options: in.PassOptions()})
	})
}

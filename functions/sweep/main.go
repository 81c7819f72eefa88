// Command sweep is the sweep Lambda function: on a schedule, one pass that
// puts deliveries pushed but never acknowledged back to pending (or dead)
// and wakes the relay. Wiring only; the logic is shared/sweep.
package main

import (
	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

func main() {
	boot.Serve("sweep", func(in *boot.Init, cfg sweep.Config) (boot.Service, error) {
		return sweep.New(in.Database(pg.Options{}), cfg, sweep.Options{Options: in.PassOptions()})
	})
}

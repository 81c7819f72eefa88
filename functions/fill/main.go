// Command fill is the fill Lambda function: on a schedule, one pass that
// proves and fills abandoned sequence gaps, then watches for new ones until
// its budget ends or the next invocation takes over. Wiring only; the
// logic is shared/fill.
package main

import (
	"github.com/outboxkeeper/outboxkeeper/internal/boot"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

func main() {
	boot.Serve("fill", func(in *boot.Init, cfg fill.Config) (boot.Service, error) {
		return fill.New(in.Database(pg.Options{}), cfg, fill.Options{Options: in.PassOptions()})
	})
}

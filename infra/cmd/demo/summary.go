package main

import (
	"encoding/json"
	"os"
	"slices"
	"time"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
)

// summary is the demo's result as JSON (DEMO_SUMMARY), in the one shape
// make bench reads it in; latency is one group's figures.
type (
	summary = local.DemoSummary
	latency = local.Latency
)

func figures(d []time.Duration) latency {
	if len(d) == 0 {
		return latency{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return latency{N: len(s), P50: quantile(s, 0.50).Seconds(), P99: quantile(s, 0.99).Seconds(), MaxS: s[len(s)-1].Seconds()}
}

func writeSummary(path string, cfg demoConfig, schedule string, o outcome, ok bool) error {
	sm := summary{
		OK: ok, Schedule: schedule, DurationS: cfg.Duration.Seconds(),
		HoldS: cfg.Hold.Seconds(), HoldEveryS: cfg.HoldEvery.Seconds(), Publishers: cfg.Publishers,
		GraceS: o.fill.Grace.Seconds(), TickS: o.fill.Tick.Seconds(),
		Committed: len(o.committed), RolledBack: len(o.abandoned),
		Invocations: o.invocations,
	}
	p, c := o.placeholderLatencies(), o.passLatencies()
	sm.Placeholder.Reported, sm.Placeholder.Unreported = figures(p[true]), figures(p[false])
	sm.Consumer.Reported, sm.Consumer.Unreported = figures(c[true]), figures(c[false])
	all, own := o.queueLatencies()
	sm.CommitToQueue.All, sm.CommitToQueue.FromRead = figures(all), figures(own)
	b, err := json.MarshalIndent(sm, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

package main

import (
	"encoding/json"
	"os"
	"slices"
	"time"
)

// summary is the demo's result as JSON (DEMO_SUMMARY), for make bench:
// the verdict, the settings it ran with, and each latency's figures.
type summary struct {
	OK          bool    `json:"ok"`
	Schedule    string  `json:"schedule"`
	DurationS   float64 `json:"duration_s"`
	HoldS       float64 `json:"hold_s"`
	HoldEveryS  float64 `json:"hold_every_s"`
	Publishers  int     `json:"publishers"`
	GraceS      float64 `json:"grace_s"`
	TickS       float64 `json:"tick_s"`
	Committed   int     `json:"committed"`
	RolledBack  int     `json:"rolled_back"`
	Placeholder struct {
		Reported   latency `json:"reported"`
		Unreported latency `json:"unreported"`
	} `json:"rollback_to_placeholder"`
	Consumer struct {
		Reported   latency `json:"reported"`
		Unreported latency `json:"unreported"`
	} `json:"rollback_to_consumer"`
	// CommitToQueue is commit → message in the relay's queue, and the
	// demo's consumer's first read of the event → the queue.
	CommitToQueue struct {
		All      latency `json:"all"`
		FromRead latency `json:"from_consumer_read"`
	} `json:"commit_to_queue"`
	// Invocations counts each function's invocations over the run: what
	// a latency costs (compensate's per report, the fill's per minute).
	Invocations map[string]int `json:"invocations"`
}

// latency is one group's figures in seconds.
type latency struct {
	N    int     `json:"n"`
	P50  float64 `json:"p50_s"`
	P99  float64 `json:"p99_s"`
	MaxS float64 `json:"max_s"`
}

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

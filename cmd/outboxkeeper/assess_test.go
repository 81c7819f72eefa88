package main

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/queuedepth"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

// The rule status exits 3 by, one finding at a time, without a database.

var defaults = thresholds{silentAfter: 5 * time.Minute, pruneSilentAfter: 2 * time.Hour, stalledAfter: 5 * time.Minute,
	openAfter: 15 * time.Minute, stuckAfter: time.Minute}

// healthy is a report nothing is wrong with.
func healthy() *statusReport {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	swept := now.Add(-30 * time.Second)
	pruned := now.Add(-30 * time.Minute)
	r := &statusReport{At: now, PruneInstalledAt: ptr(now.Add(-30 * 24 * time.Hour))}
	r.Fill = fillReport{Started: true, Watermark: 10, Head: 10, PassEverRan: true, LastWriteAt: ptr(now.Add(-2 * time.Second)), LastWriteAgoS: ptr(2.0)}
	r.Sweep.LastPassAt = &swept
	r.Prune.LastPassAt = &pruned
	return r
}

func ptr[T any](v T) *T { return &v }

func TestAssess(t *testing.T) {
	cases := []struct {
		name string
		make func(r *statusReport)
		want []string
	}{
		{"healthy", func(*statusReport) {}, nil},
		{"fill silent", func(r *statusReport) { r.Fill.LastWriteAgoS = ptr(301.0) }, []string{"fill-silent"}},
		{"fill quiet but within the threshold", func(r *statusReport) { r.Fill.LastWriteAgoS = ptr(299.0) }, nil},
		{"fill never ran since the migrations", func(r *statusReport) {
			r.Fill = fillReport{Head: 3, Lag: 3, StalledAt: ptr(int64(1)), Waiting: "start"}
		}, []string{"fill-silent"}},
		{"sweep never ran", func(r *statusReport) { r.Sweep.LastPassAt = nil }, []string{"sweep-silent"}},
		{"sweep silent", func(r *statusReport) { r.Sweep.LastPassAt = ptr(r.At.Add(-6 * time.Minute)) }, []string{"sweep-silent"}},
		{"prune never ran (a new deployment)", func(r *statusReport) {
			r.Prune.LastPassAt, r.PruneInstalledAt = nil, ptr(r.At.Add(-time.Hour))
		}, nil},
		{"prune never ran since its deployment", func(r *statusReport) {
			r.Prune.LastPassAt, r.PruneInstalledAt = nil, ptr(r.At.Add(-3*time.Hour))
		}, []string{"prune-silent"}},
		{"prune silent", func(r *statusReport) { r.Prune.LastPassAt = ptr(r.At.Add(-3 * time.Hour)) }, []string{"prune-silent"}},
		{"proof blocked", func(r *statusReport) {
			r.Fill.Waiting, r.Fill.StallAgeS, r.Fill.ProofBlockedS = fill.WaitingProof, ptr(400.0), ptr(360.0)
		}, []string{"proof-blocked"}},
		{"proof blocked briefly", func(r *statusReport) {
			r.Fill.Waiting, r.Fill.StallAgeS, r.Fill.ProofBlockedS = fill.WaitingProof, ptr(20.0), ptr(10.0)
		}, nil},
		{"stalled without a blocked proof", func(r *statusReport) { r.Fill.Waiting, r.Fill.StallAgeS = "fill", ptr(301.0) }, []string{"stalled"}},
		{"dead deliveries", func(r *statusReport) { r.Deliveries = store.DeliveryCounts{Dead: 2} }, []string{"dead"}},
		{"relay down", func(r *statusReport) { r.Deliveries = store.DeliveryCounts{Pending: 1, OldestOpenSeconds: ptr(901.0)} }, []string{"relay"}},
		{"DLQ not empty", func(r *statusReport) { r.DLQ = &queuedepth.Depth{Visible: 1} }, []string{"dlq"}},
		{"DLQ empty", func(r *statusReport) { r.DLQ = &queuedepth.Depth{} }, nil},
		{"several", func(r *statusReport) {
			r.Fill.LastWriteAgoS = ptr(600.0)
			r.Deliveries = store.DeliveryCounts{Dead: 1}
		}, []string{"fill-silent", "dead"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := healthy()
			c.make(r)
			var got []string
			for _, f := range assess(r, defaults) {
				got = append(got, f.Name)
				if f.What == "" || f.Next == "" {
					t.Errorf("finding %s says nothing or no next step: %+v", f.Name, f)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("findings = %v, want %v", got, c.want)
			}
		})
	}
}

// What the fill is doing, from its state.
func TestDescribeFill(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	marker := uint64(7305)
	since := now.Add(-time.Minute)
	base := fill.Status{Head: 12, Now: now, UpdatedAt: now}
	base.Started, base.Watermark = true, 9
	cases := []struct {
		name string
		edit func(s *fill.Status)
		want string
	}{
		{"never started", func(s *fill.Status) { s.Started = false }, "start"},
		{"caught up", func(s *fill.Status) { s.Watermark = 12 }, ""},
		{"behind with no cycle yet", func(*fill.Status) {}, "look"},
		{"in its grace", func(s *fill.Status) { s.Cycle = &fill.Cycle{From: 9, FirstSeenAt: since} }, fill.WaitingGrace},
		{"proof blocked", func(s *fill.Status) {
			s.Cycle = &fill.Cycle{From: 9, FirstSeenAt: since, Marker: &marker, MarkerHead: 12}
			s.ProofBlockedSince = &since
		}, fill.WaitingProof},
		{"proven, filling", func(s *fill.Status) {
			s.Cycle = &fill.Cycle{From: 9, FirstSeenAt: since, Marker: &marker, MarkerHead: 12}
		}, "fill"},
	}
	for _, c := range cases {
		s := base
		c.edit(&s)
		if got := describeFill(s, true).Waiting; got != c.want {
			t.Errorf("%s: waiting %q, want %q", c.name, got, c.want)
		}
	}
	s := base
	s.Cycle = &fill.Cycle{From: 9, FirstSeenAt: since}
	if r := describeFill(s, true); r.Lag != 3 || r.StalledAt == nil || *r.StalledAt != 10 || r.StallAgeS == nil || *r.StallAgeS != 60 {
		t.Errorf("describeFill = %+v, want lag 3, stalled at 10 for 60s", r)
	}
}

// Before the first pass the watermark is 0 and read_events stops at the
// first missing sequence: the lag is the head, not 0.
func TestDescribeFillBeforeTheFirstPassShowsTheLag(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := describeFill(fill.Status{Head: 12, Now: now, UpdatedAt: now}, false)
	if r.Lag != 12 {
		t.Errorf("lag = %d, want 12 (the head)", r.Lag)
	}
	if r.StalledAt == nil || *r.StalledAt != 1 {
		t.Errorf("stalled_at = %v, want 1", r.StalledAt)
	}
	if r.LastWriteAt != nil || r.LastWriteAgoS != nil {
		t.Errorf("last write %v, %v: the migration's write is not a pass's", r.LastWriteAt, r.LastWriteAgoS)
	}
}

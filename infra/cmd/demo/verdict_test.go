package main

import (
	"slices"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

// healthy is an outcome every check passes: 1..4 committed, consumed once
// and relayed to the queue, 5 rolled back and filled, one delivery acked
// after one lost ack.
func healthy() outcome {
	at := time.Unix(1000, 0)
	return outcome{
		committed: map[int64]bool{1: true, 2: true, 3: true, 4: true},
		abandoned: map[int64]rollback{5: {at: at, reported: true}, 6: {at: at}},
		placeholders: map[int64]placeholder{
			5: {FilledBy: "compensate", RecordedAt: at.Add(time.Second)},
			6: {FilledBy: "fill", RecordedAt: at.Add(2500 * time.Millisecond)},
		},
		fill: fill.Config{Grace: 2 * time.Second, Tick: 500 * time.Millisecond},
		consumer: consumerView{Pos: 6, Head: 6, ByPath: map[string]int{"compensate": 1, "fill": 1},
			Seen: map[int64]int{1: 1, 2: 1, 3: 1, 4: 1}},
		deliveries: deliveryCounts{Total: 1, Acked: 1, Reset: 1},
		enqueued:   1, lostAcks: 1,
		ackedIDs: []int64{1}, delivered: deliveryView{seen: map[int64]int{1: 2}},
		invocations: map[string]int{"fill": 1}, invokeErrs: map[string]int{},
		relayed: queueView{Arrived: map[int64]time.Time{1: at, 2: at, 3: at, 4: at}, Repeats: 1, Groups: 1},
	}
}

func failing(checks []local.Check) []string {
	var out []string
	for _, c := range checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// The verdict passes a healthy outcome and fails each kind of breakage by
// the check that names it, and by that check alone.
func TestVerdictFailsEachBreakageByTheCheckThatNamesIt(t *testing.T) {
	if got := failing(healthy().checks()); len(got) != 0 {
		t.Fatalf("healthy outcome fails %v", got)
	}
	cases := map[string]func(o *outcome){
		"committed events consumed exactly once": func(o *outcome) { o.consumer.Seen[2] = 2 },
		"consumed in order":                      func(o *outcome) { o.consumer.OutOfOrder = 1 },
		"every rolled-back sequence filled":      func(o *outcome) { delete(o.placeholders, 5) },
		"no gap left":                            func(o *outcome) { o.missing = 1 },
		"unreported rollbacks filled in time": func(o *outcome) {
			o.placeholders[6] = placeholder{FilledBy: "fill", RecordedAt: o.abandoned[6].at.Add(4 * time.Second)}
		},
		"deliveries settled":                               func(o *outcome) { o.deliveries.Open = 1 },
		"every lost ack swept back once":                   func(o *outcome) { o.deliveries.Reset = 2 },
		"every delivery reached its recipient":             func(o *outcome) { o.delivered.seen = map[int64]int{} },
		"every webhook request signed":                     func(o *outcome) { o.delivered.badSignatures = 1 },
		"report queues drained":                            func(o *outcome) { o.dlqDepth = 1 },
		"function invocations succeeded":                   func(o *outcome) { o.invokeErrs["fill"] = 1 },
		"workload errors":                                  func(o *outcome) { o.errCount = 1 },
		"relayed: every committed event in the queue once": func(o *outcome) { delete(o.relayed.Arrived, 3) },
		"relayed in order per group":                       func(o *outcome) { o.relayed.OutOfOrder = 1 },
		"no placeholder relayed":                           func(o *outcome) { o.relayed.Arrived[6] = time.Unix(1000, 0) },
	}
	for want, breakIt := range cases {
		o := healthy()
		breakIt(&o)
		if got := failing(o.checks()); !slices.Equal(got, []string{want}) {
			t.Errorf("breaking %q fails %v, want only that check", want, got)
		}
	}
	// A committed event never consumed, and a placeholder nobody explains.
	o := healthy()
	delete(o.consumer.Seen, 4)
	o.placeholders[9] = placeholder{FilledBy: "fill"}
	if got := failing(o.checks()); len(got) != 2 {
		t.Errorf("missing event and stray placeholder fail %v, want two checks", got)
	}
}

// The invocations check counts each function the demo runs, the deliver
// function's included.
func TestInvocationsCheckCountsEveryFunction(t *testing.T) {
	o := healthy()
	o.invocations = map[string]int{"fill": 1, "sweep": 2, "compensate": 3, "prune": 4, "relay": 5, "deliver": 6}
	var detail string
	for _, c := range o.checks() {
		if c.Name == "function invocations succeeded" {
			detail = c.Detail
		}
	}
	want := "fill 1, sweep 2, compensate 3, prune 4, relay 5, deliver 6 invocations; 0 failed"
	if detail != want {
		t.Errorf("the invocations check says %q, want %q", detail, want)
	}
}

// An event relayed twice (at least once) counts once, as a consumer that
// deduplicates by sequence sees it; a sequence that never committed does
// not pass.
func TestRelayedCountsEachSequenceOnceAndNothingUnknown(t *testing.T) {
	c := newQueueConsumer(nil, newLedger())
	at := time.Unix(1000, 0)
	for _, seq := range []int64{1, 2, 2, 3, 4} {
		c.take(seq, "demo.order", at)
	}
	o := healthy()
	o.relayed = c.view()
	if got := failing(o.checks()); len(got) != 0 {
		t.Errorf("a repeat of 2 fails %v, want none: dedup by sequence", got)
	}
	if o.relayed.Repeats != 1 || o.relayed.OutOfOrder != 0 {
		t.Errorf("repeats %d out of order %d, want 1 and 0", o.relayed.Repeats, o.relayed.OutOfOrder)
	}
	c.take(9, "demo.order", at)
	o.relayed = c.view()
	if got := failing(o.checks()); !slices.Equal(got, []string{"relayed: every committed event in the queue once"}) {
		t.Errorf("an unknown sequence in the queue fails %v", got)
	}
}

// The relay's latency runs from the COMMIT's return to the message's
// arrival in the queue, and its own share from the consumer's first read
// of the event.
func TestQueueLatencyIsCommitToArrival(t *testing.T) {
	o := healthy()
	at := time.Unix(1000, 0)
	o.committedAt = map[int64]time.Time{1: at.Add(-300 * time.Millisecond), 2: at.Add(-2 * time.Second), 7: at}
	o.consumer.Read = map[int64]time.Time{2: at.Add(-100 * time.Millisecond)}
	all, own := o.queueLatencies()
	slices.Sort(all)
	if !slices.Equal(all, []time.Duration{300 * time.Millisecond, 2 * time.Second}) {
		t.Errorf("latencies %v, want [300ms 2s]: 7 never arrived", all)
	}
	if !slices.Equal(own, []time.Duration{100 * time.Millisecond}) {
		t.Errorf("the consumer's read → queue %v, want [100ms]: only 2 was read", own)
	}
}

func TestQuantileTakesTheSampleAtTheRank(t *testing.T) {
	d := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	if q := quantile(d, 0.5); q != 5 {
		t.Errorf("p50 = %v, want 5", q)
	}
	if q := quantile(d, 0.99); q != 10 {
		t.Errorf("p99 = %v, want 10", q)
	}
	if q := quantile(d[:1], 0.99); q != 1 {
		t.Errorf("p99 of one sample = %v, want that sample", q)
	}
}

// The consumer's latency of a rolled-back sequence runs from the client's
// rollback to the read that took its placeholder, per path; a sequence it
// never passed has none.
func TestConsumerLatencyIsRollbackToThePassingRead(t *testing.T) {
	o := healthy()
	at := o.abandoned[5].at
	o.consumer.Passed = map[int64]time.Time{5: at.Add(1200 * time.Millisecond), 6: at.Add(3 * time.Second)}
	got := o.passLatencies()
	if !slices.Equal(got[true], []time.Duration{1200 * time.Millisecond}) {
		t.Errorf("reported: %v, want [1.2s]", got[true])
	}
	if !slices.Equal(got[false], []time.Duration{3 * time.Second}) {
		t.Errorf("unreported: %v, want [3s]", got[false])
	}
	delete(o.consumer.Passed, 6)
	if n := len(o.passLatencies()[false]); n != 0 {
		t.Errorf("a sequence never passed has %d latencies, want none", n)
	}
}

// DEMO_HOLD=0 runs without the held transaction; no other duration may be
// zero.
func TestHoldMayBeZeroOtherDurationsMayNot(t *testing.T) {
	t.Setenv("DEMO_HOLD", "0s")
	cfg, err := loadConfig()
	if err != nil || cfg.Hold != 0 {
		t.Errorf("DEMO_HOLD=0s: hold %s, %v; want 0 and no error", cfg.Hold, err)
	}
	t.Setenv("DEMO_DURATION", "0s")
	if _, err := loadConfig(); err == nil {
		t.Error("DEMO_DURATION=0s: no error, want one")
	}
	t.Setenv("DEMO_DURATION", "10s")
	t.Setenv("DEMO_HOLD", "-1s")
	if _, err := loadConfig(); err == nil {
		t.Error("DEMO_HOLD=-1s: no error, want one")
	}
}

func TestFiguresAreNearestRankQuantiles(t *testing.T) {
	var d []time.Duration
	for i := 100; i >= 1; i-- {
		d = append(d, time.Duration(i)*time.Second)
	}
	f := figures(d)
	if f.N != 100 || f.P50 != 50 || f.P99 != 99 || f.MaxS != 100 {
		t.Errorf("figures = %+v, want n 100, p50 50s, p99 99s, max 100s", f)
	}
}

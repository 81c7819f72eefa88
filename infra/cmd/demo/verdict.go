package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
)

// outcome is everything the verdict judges, gathered after the run.
type outcome struct {
	committed    map[int64]bool
	abandoned    map[int64]rollback
	held         []local.Interval
	fill         fill.Config
	placeholders map[int64]placeholder
	consumer     consumerView
	missing      int64
	deliveries   deliveryCounts
	enqueued     int64
	lostAcks     int64
	// ackedIDs are the acked deliveries; delivered what the recipients
	// received.
	ackedIDs    []int64
	delivered   deliveryView
	errCount    int
	errs        []string
	invokeErrs  map[string]int
	invocations map[string]int
	queueDepth  int
	dlqDepth    int
	// relayed is what arrived in the queue the relay's topic fans out to;
	// committedAt when each committed event's COMMIT returned.
	relayed     queueView
	committedAt map[int64]time.Time
}

func (o outcome) checks() []local.Check {
	var checks []local.Check
	add := func(name string, ok bool, format string, args ...any) {
		checks = append(checks, local.Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}

	// Exactly once: every committed sequence seen once, nothing else real.
	once, missing, dup, unknown := 0, 0, 0, 0
	for seq := range o.committed {
		switch o.consumer.Seen[seq] {
		case 0:
			missing++
		case 1:
			once++
		default:
			dup++
		}
	}
	for seq := range o.consumer.Seen {
		if !o.committed[seq] {
			unknown++
		}
	}
	add("committed events consumed exactly once", missing == 0 && dup == 0 && unknown == 0 && len(o.committed) > 0,
		"%d committed: %d once, %d missing, %d twice, %d unknown", len(o.committed), once, missing, dup, unknown)
	add("consumed in order", o.consumer.OutOfOrder == 0,
		"%d steps, %d not +1", o.consumer.Pos, o.consumer.OutOfOrder)

	// Every abandoned sequence became a placeholder, and nothing else did.
	filled, reported := 0, 0
	for seq, rb := range o.abandoned {
		if _, ok := o.placeholders[seq]; ok {
			filled++
		}
		if rb.reported {
			reported++
		}
	}
	stray := 0
	for seq := range o.placeholders {
		if _, ok := o.abandoned[seq]; !ok {
			stray++
		}
	}
	add("every rolled-back sequence filled", filled == len(o.abandoned) && stray == 0,
		"%d rolled back (%d reported, %d unreported): %d placeholders (fill %d, compensate %d), %d unexplained",
		len(o.abandoned), reported, len(o.abandoned)-reported, filled,
		o.consumer.ByPath["fill"], o.consumer.ByPath["compensate"], stray)
	within, late, worst := o.unreportedWithinBound()
	add("unreported rollbacks filled in time", late == 0,
		"%d within grace %s + tick %s (+ the end of an older open transaction) + %s, %d late%s",
		within, o.fill.Grace, o.fill.Tick, latencyAllowance, late, worst)
	add("no gap left", o.missing == 0 && o.consumer.Pos == o.consumer.Head,
		"consumer at %d, head %d, %d missing; longest stall %.1fs",
		o.consumer.Pos, o.consumer.Head, o.missing, o.consumer.MaxStall.Seconds())

	// The relay: what reached the queue through SNS, from the queue.
	arrived, lost, unknownR, placeholdersSent := 0, 0, 0, 0
	for seq := range o.committed {
		if _, ok := o.relayed.Arrived[seq]; ok {
			arrived++
		} else {
			lost++
		}
	}
	for seq := range o.relayed.Arrived {
		_, isPlaceholder := o.placeholders[seq]
		_, isAbandoned := o.abandoned[seq]
		switch {
		case isPlaceholder || isAbandoned:
			placeholdersSent++
		case !o.committed[seq]:
			unknownR++
		}
	}
	add("relayed: every committed event in the queue once", lost == 0 && unknownR == 0 && len(o.committed) > 0,
		"%d committed: %d arrived (after dedup by sequence: %d repeats dropped), %d missing, %d unknown",
		len(o.committed), arrived, o.relayed.Repeats, lost, unknownR)
	add("relayed in order per group", o.relayed.OutOfOrder == 0,
		"%d groups, %d arrivals after a later sequence of their group", o.relayed.Groups, o.relayed.OutOfOrder)
	add("no placeholder relayed", placeholdersSent == 0,
		"%d placeholders and rolled-back sequences in the queue", placeholdersSent)

	add("deliveries settled", o.deliveries.Open == 0 && o.deliveries.Total == o.enqueued,
		"%d enqueued, %d acked, %d dead, %d open", o.enqueued, o.deliveries.Acked, o.deliveries.Dead, o.deliveries.Open)
	// Each lost ack leaves one row delivered; the sweep resets it exactly
	// once (or kills it at the redelivery limit).
	add("every lost ack swept back once", o.lostAcks == o.deliveries.Reset+o.deliveries.Dead,
		"%d acks lost, %d resets + %d dead", o.lostAcks, o.deliveries.Reset, o.deliveries.Dead)

	// Every acked delivery reached its recipient (the webhook or the
	// queue), and every webhook request carried a valid signature.
	unseen := 0
	for _, id := range o.ackedIDs {
		if o.delivered.seen[id] == 0 {
			unseen++
		}
	}
	add("every delivery reached its recipient", unseen == 0 && len(o.ackedIDs) == int(o.deliveries.Acked),
		"%d acked, %d of them never seen by the webhook or the queue; %d distinct ids arrived", len(o.ackedIDs), unseen, len(o.delivered.seen))
	add("every webhook request signed", o.delivered.badSignatures == 0,
		"%d requests did not verify with the signing key", o.delivered.badSignatures)

	add("report queues drained", o.queueDepth == 0 && o.dlqDepth == 0,
		"%d left in the queue, %d dead-lettered", o.queueDepth, o.dlqDepth)
	failedInv := 0
	for _, n := range o.invokeErrs {
		failedInv += n
	}
	counts := make([]string, len(demoFunctions))
	for i, fn := range demoFunctions {
		counts[i] = fmt.Sprintf("%s %d", fn, o.invocations[fn])
	}
	add("function invocations succeeded", failedInv == 0,
		"%s invocations; %d failed", strings.Join(counts, ", "), failedInv)
	detail := "none"
	if o.errCount > 0 {
		detail = fmt.Sprintf("%d, first: %v", o.errCount, o.errs)
	}
	add("workload errors", o.errCount == 0, "%s", detail)
	return checks
}

// demoFunctions are the functions the demo invokes, in the order the
// verdict counts their invocations.
var demoFunctions = []string{"fill", "sweep", "compensate", "prune", "relay", "deliver"}

// latencyAllowance is added to the fill's promise: the statements between
// seeing a gap and writing it (head read, page, marker, proof, insert), and
// the tick on which a proof that waited for an old transaction sees it end.
const latencyAllowance = time.Second

// unreportedWithinBound judges every unreported rollback against
// local.FillBound plus latencyAllowance; worst describes the latest one.
func (o outcome) unreportedWithinBound() (within, late int, worst string) {
	var excess time.Duration
	for seq, rb := range o.abandoned {
		p, ok := o.placeholders[seq]
		if rb.reported || !ok {
			continue // reported ones are compensate's; missing ones fail "filled"
		}
		bound := local.FillBound(rb.at, o.fill.Grace, o.fill.Tick, o.held).Add(latencyAllowance)
		if p.RecordedAt.After(bound) {
			late++
			excess = max(excess, p.RecordedAt.Sub(bound))
			continue
		}
		within++
	}
	if late > 0 {
		worst = fmt.Sprintf(" (worst %.2fs past its bound)", excess.Seconds())
	}
	return within, late, worst
}

// latencies prints rollback→placeholder latency (placeholder recorded_at
// minus the client's rollback time) for reported and unreported rollbacks.
func (o outcome) latencies(w io.Writer) {
	printLatencies(w, o.placeholderLatencies())
}

// consumerLatencies prints rollback→consumer latency: when the consumer's
// read that took the placeholder came back, minus the client's rollback
// time.
func (o outcome) consumerLatencies(w io.Writer) {
	printLatencies(w, o.passLatencies())
}

// relayLatencies prints commit → message in the queue, and the relay's
// own share of it: from when the demo's consumer, polling read_events
// every 50 ms, first read the event. read_events passes no sequence an
// open writer may still commit nor an unproven gap, so an event behind a
// held transaction or a crashed writer waits for the hold's end or the
// fill's proof (grace + tick), relayed or read directly alike.
func (o outcome) relayLatencies(w io.Writer) {
	all, own := o.queueLatencies()
	for _, g := range []struct {
		name string
		d    []time.Duration
	}{{"commit → queue          ", all}, {"consumer's read → queue ", own}} {
		if len(g.d) == 0 {
			fmt.Fprintf(w, "  %s  no samples\n", g.name)
			continue
		}
		slices.Sort(g.d)
		fmt.Fprintf(w, "  %s  n=%-5d p50 %6.3fs   p99 %6.3fs   max %6.3fs\n",
			g.name, len(g.d), quantile(g.d, 0.50).Seconds(), quantile(g.d, 0.99).Seconds(), g.d[len(g.d)-1].Seconds())
	}
}

// queueLatencies are, for the committed events that arrived, commit →
// queue and the consumer's first read → queue.
func (o outcome) queueLatencies() (all, own []time.Duration) {
	for seq, at := range o.committedAt {
		in, ok := o.relayed.Arrived[seq]
		if !ok {
			continue
		}
		all = append(all, in.Sub(at))
		if read, ok := o.consumer.Read[seq]; ok {
			own = append(own, in.Sub(read))
		}
	}
	return all, own
}

// placeholderLatencies are rollback→placeholder latencies, by reported.
func (o outcome) placeholderLatencies() map[bool][]time.Duration {
	groups := map[bool][]time.Duration{}
	for seq, rb := range o.abandoned {
		if p, ok := o.placeholders[seq]; ok {
			groups[rb.reported] = append(groups[rb.reported], p.RecordedAt.Sub(rb.at))
		}
	}
	return groups
}

// passLatencies are rollback→consumer latencies, by reported.
func (o outcome) passLatencies() map[bool][]time.Duration {
	groups := map[bool][]time.Duration{}
	for seq, rb := range o.abandoned {
		if at, ok := o.consumer.Passed[seq]; ok {
			groups[rb.reported] = append(groups[rb.reported], at.Sub(rb.at))
		}
	}
	return groups
}

func printLatencies(w io.Writer, groups map[bool][]time.Duration) {
	for _, reported := range []bool{true, false} {
		name := "unreported (fill proves)"
		if reported {
			name = "reported (compensate)   "
		}
		d := groups[reported]
		if len(d) == 0 {
			fmt.Fprintf(w, "  %s  no samples\n", name)
			continue
		}
		slices.Sort(d)
		fmt.Fprintf(w, "  %s  n=%-5d p50 %6.2fs   p99 %6.2fs   max %6.2fs\n",
			name, len(d), quantile(d, 0.50).Seconds(), quantile(d, 0.99).Seconds(), d[len(d)-1].Seconds())
	}
}

// quantile is the nearest-rank quantile of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

package main

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
)

// Demo is the demo's summary (infra/cmd/demo, DEMO_SUMMARY) rows 11 and
// 19 read; Latency one group of its latencies.
type (
	Demo    = local.DemoSummary
	Latency = local.Latency
)

// Row is one line of the table: what is measured, against what, the
// target, and how to judge a run.
type Row struct {
	N        int
	Work     string
	Compared string
	Target   string
	Judge    func(m Metrics, d *Demo) Result
}

// Result is a row judged: the figures, one check per target, and the
// detail lines for the row's section.
type Result struct {
	Checks []Check
	Detail []string
}

// Check is one target's verdict.
type Check struct {
	What    string // the figure, as measured ("0.73 × the limit")
	Target  string // "≥ 0.6"
	OK      bool
	Missing bool // the run did not report it
}

// Met says every check of the row passed.
func (r Result) Met() bool {
	for _, c := range r.Checks {
		if !c.OK {
			return false
		}
	}
	return len(r.Checks) > 0
}

// judge collects checks from metrics; a metric the run did not report
// makes its check missing, never met.
type judge struct {
	m   Metrics
	res Result
}

// limit is one target on one benchmark's figure: the figure, its label
// and format in the table, and the test it must pass.
type limit struct {
	bench, unit, label, format string
	target                     string
	ok                         func(float64) bool
}

// atLeast: the figure must be at least min.
func atLeast(bench, unit, label string, min float64, format string) limit {
	return limit{bench, unit, label, format, fmt.Sprintf("≥ %g", min), func(v float64) bool { return v >= min }}
}

// atMost: the figure must be at most max.
func atMost(bench, unit, label string, max float64, format string) limit {
	return limit{bench, unit, label, format, fmt.Sprintf("≤ %g", max), func(v float64) bool { return v <= max }}
}

// within: the figure must be lo to hi, said as target.
func within(bench, unit, label, format, target string, lo, hi float64) limit {
	return limit{bench, unit, label, format, target, func(v float64) bool { return v >= lo && v <= hi }}
}

func (j *judge) check(l limit) {
	v, found := j.m.Get(l.bench, l.unit)
	if !found {
		j.res.Checks = append(j.res.Checks, Check{What: l.label + ": not reported", Target: l.target, Missing: true})
		return
	}
	j.res.Checks = append(j.res.Checks, Check{What: l.label + " " + fmt.Sprintf(l.format, v), Target: l.target, OK: l.ok(v)})
}

// limits is the Judge of a row whose targets are all limits: one check
// each, in order, then every metric of each benchmark they name.
func limits(ls ...limit) func(Metrics, *Demo) Result {
	return func(m Metrics, _ *Demo) Result {
		j := &judge{m: m}
		var benches []string
		for _, l := range ls {
			j.check(l)
			if !slices.Contains(benches, l.bench) {
				benches = append(benches, l.bench)
			}
		}
		for _, b := range benches {
			j.detail(b)
		}
		return j.res
	}
}

// detail lists a benchmark's every metric, for the row's section.
func (j *judge) detail(bench string) {
	values, ok := j.m[bench]
	if !ok {
		j.res.Detail = append(j.res.Detail, fmt.Sprintf("`%s`: not run", bench))
		return
	}
	j.res.Detail = append(j.res.Detail, fmt.Sprintf("`%s`: %s", bench, formatMetrics(values)))
}

func formatMetrics(values map[string]float64) string {
	units := make([]string, 0, len(values))
	for u := range values {
		if u != "ns/op" {
			units = append(units, u)
		}
	}
	slices.Sort(units)
	parts := make([]string, len(units))
	for i, u := range units {
		parts[i] = fmt.Sprintf("%s %s", number(values[u]), u)
	}
	return strings.Join(parts, ", ")
}

// number prints a figure with three significant digits, integers whole.
func number(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) >= 1:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

const mb = 1_000_000

// Rows are the table of BENCHMARKS.md, the targets of the product issue.
var Rows = []Row{
	{1, "fill: 10,000 abandoned sequences in one burst",
		"a per-row insert loop; the limit: one bare `INSERT ... SELECT generate_series` of the same placeholders",
		"≥ 0.6 × the limit's rows/s; ≥ 20 × the loop",
		limits(
			atLeast("BenchmarkFillBurst", "fill/limit", "writes after the proof at", 0.6, "%.2f × the limit"),
			atLeast("BenchmarkFillBurst", "fill/loop", "", 20, "%.0f × the loop"))},
	{2, "fill: 10,000 gaps scattered among 100,000 new sequences; a 200,000 gap appearing while the fill runs",
		"the limit as in 1",
		"one cycle each; writes after the proof ≥ 0.3 × the limit",
		limits(
			atMost("BenchmarkFillScatteredGaps", "cycles", "scattered:", 1, "%.0f cycle"),
			atLeast("BenchmarkFillScatteredGaps", "fill/limit", "", 0.3, "%.2f × the limit"),
			atMost("BenchmarkFillLiveGap", "cycles", "live gap:", 1, "%.0f cycle"),
			atLeast("BenchmarkFillLiveGap", "fill/limit", "", 0.3, "%.2f × the limit"))},
	{3, "sweep: 10,000 stuck delivered rows, beside 1M acked history rows",
		"a per-row compare-and-set loop (the reference sweeper's); the limit: one bare `UPDATE` of the same rows",
		"≥ 0.6 × the limit; ≥ 10 × the per-row loop; with the history ≤ 1.2 × without",
		limits(
			atLeast("BenchmarkResetStuck", "pass/limit", "", 0.6, "%.2f × the limit"),
			atLeast("BenchmarkResetStuck", "pass/per-row", "", 10, "%.1f × the loop"),
			atMost("BenchmarkResetStuck", "history/no-history", "with the history", 1.2, "%.2f × without"))},
	{4, "compensate: a batch of 10 reports × 100 sequences",
		"each message with its own statements (its check, then one per sequence)",
		"≤ 3 statements for the batch; ≥ 5 × faster",
		limits(
			atMost("BenchmarkBatch10x100", "set-stmts/batch", "", 3, "%.0f statements"),
			atLeast("BenchmarkBatch10x100", "per-message/set", "", 5, "%.1f × faster"))},
	{5, "healthy watching fill on tables of 100k, 1M and 10M rows",
		"the pass on each size",
		"statements per tick constant; time at 10M ≤ 1.5 × at 100k",
		// Constant: the same within a tenth (a writer's commit landing on
		// one tick or the next moves the mean by that much).
		limits(
			within("BenchmarkFillWatching", "statements/smallest-table", "statements per tick at 10M", "%.2f × at 100k", "within 1 ± 0.1", 0.9, 1.1),
			atMost("BenchmarkFillWatching", "db-time/smallest-table", "database time per tick at 10M", 1.5, "%.2f × at 100k"))},
	{6, "prune: 1M acked deliveries and 1M events past retention",
		"one bare `DELETE` of the same rows (per table)",
		"≥ 0.5 × the limit's rows/s, never holding a lock longer than one batch",
		func(m Metrics, _ *Demo) Result {
			j := &judge{m: m}
			j.check(atLeast("BenchmarkPrune", "prune/limit", "", 0.5, "%.2f × the limit"))
			// Every statement of a pass is one batch and its own
			// transaction: its longest statement is its longest lock.
			longest, ok1 := m.Get("BenchmarkPrune", "longest-statement-ms")
			bare, ok2 := m.Get("BenchmarkPrune", "bare-delete-ms")
			c := Check{Target: "one batch (5000 rows)", Missing: !ok1 || !ok2}
			if !c.Missing {
				c.What = fmt.Sprintf("longest lock %.0f ms (one batch; the bare DELETE holds its for %.0f ms)", longest, bare)
				c.OK = longest < bare
			} else {
				c.What = "longest lock: not reported"
			}
			j.res.Checks = append(j.res.Checks, c)
			j.detail("BenchmarkPrune")
			return j.res
		}},
	{7, "`read_events` paging through 1M events (pages of 100, the consumer's own call)",
		"a bare index range scan of the same rows, decoded the same",
		"≥ 0.5 × the limit",
		limits(
			atLeast("BenchmarkReadEvents", "pgx-default-bare/read_events", "pgx's default pool:", 0.5, "%.2f × the limit"),
			atLeast("BenchmarkReadEvents", "pooler-safe-bare/read_events", "pooler-safe pool:", 0.5, "%.2f × the limit"))},
	{8, "publish: `shared/outbox` Publish and SQL `publish()`, notification off and on",
		"a bare `INSERT ... DEFAULT nextval` in the same transaction shape, with fsync on (a throwaway durable cluster) and off (the test cluster)",
		"≤ 1.2 × the bare insert with fsync on; the fsync-off ratio reported",
		func(m Metrics, _ *Demo) Result {
			j := &judge{m: m}
			j.check(atMost("BenchmarkPublish", "fsync-on-go/bare", "fsync on, Go Publish:", 1.2, "%.2f × bare"))
			j.check(atMost("BenchmarkPublish", "fsync-on-sql/bare", "fsync on, publish():", 1.2, "%.2f × bare"))
			j.check(atMost("BenchmarkPublish", "fsync-on-go-notify/bare", "fsync on, Go Publish + notification:", 1.2, "%.2f × bare"))
			j.check(atMost("BenchmarkPublish", "fsync-on-sql-notify/bare", "fsync on, publish() + notification:", 1.2, "%.2f × bare"))
			for _, arm := range []string{"go", "sql", "go-notify", "sql-notify"} {
				if v, ok := m.Get("BenchmarkPublish", "fsync-off-"+arm+"/bare"); ok {
					j.res.Detail = append(j.res.Detail, fmt.Sprintf("fsync off, %s: %.2f × bare", arm, v))
				}
			}
			j.detail("BenchmarkPublish")
			return j.res
		}},
	{9, "the pooler: every function's pass",
		"the same pass straight to the server and through PgBouncer in transaction mode",
		"≤ 1.3 × direct",
		limits(
			atMost("BenchmarkFillPooler", "pgbouncer/direct", "fill:", 1.3, "%.2f × direct"),
			atMost("BenchmarkSweepPooler", "pgbouncer/direct", "sweep:", 1.3, "%.2f × direct"),
			atMost("BenchmarkCompensatePooler", "pgbouncer/direct", "compensate:", 1.3, "%.2f × direct"),
			atMost("BenchmarkPrunePooler", "pgbouncer/direct", "prune:", 1.3, "%.2f × direct"))},
	{10, "cold start and size",
		"process start → first response of each real bootstrap under aws-lambda-rie; each binary as `sam build` makes it (linux/arm64, stripped)",
		"init ≤ 30 ms; each binary ≤ 12 MB",
		limits(
			atMost("BenchmarkColdStart", "slowest-init-ms", "slowest init", 30, "%.1f ms"),
			atMost("BenchmarkBinarySize", "largest-bytes", "largest binary", 12*mb, "%.0f B"))},
	{11, "end-to-end latency in the local stack, on the template's schedules, no older transaction open",
		"rollback → placeholder visible, reported (SQS) and unreported (fill); rollback → consumer past the sequence",
		"reported p99 ≤ 1 s; unreported p99 ≤ grace + tick + 1 s",
		func(_ Metrics, d *Demo) Result {
			var res Result
			if d == nil {
				res.Checks = []Check{{What: "the demo did not run", Target: "its summary", Missing: true}}
				return res
			}
			bound := d.GraceS + d.TickS + 1
			res.Checks = []Check{
				{What: fmt.Sprintf("reported p99 %.2f s", d.Placeholder.Reported.P99), Target: "≤ 1 s",
					OK: d.Placeholder.Reported.N > 0 && d.Placeholder.Reported.P99 <= 1},
				{What: fmt.Sprintf("unreported p99 %.2f s", d.Placeholder.Unreported.P99), Target: fmt.Sprintf("≤ %.1f s", bound),
					OK: d.Placeholder.Unreported.N > 0 && d.Placeholder.Unreported.P99 <= bound},
				{What: "the demo's verdict", Target: "every check passes", OK: d.OK},
			}
			line := func(name string, l Latency) string {
				return fmt.Sprintf("%s: n=%d, p50 %.2f s, p99 %.2f s, max %.2f s", name, l.N, l.P50, l.P99, l.MaxS)
			}
			res.Detail = []string{
				fmt.Sprintf("`make demo` with `DEMO_HOLD=0` (no held transaction): %s; %d publishers for %.0f s; grace %.1f s, tick %.1f s; %d committed, %d rolled back",
					d.Schedule, d.Publishers, d.DurationS, d.GraceS, d.TickS, d.Committed, d.RolledBack),
				line("rollback → placeholder, reported (compensate)", d.Placeholder.Reported),
				line("rollback → placeholder, unreported (fill)", d.Placeholder.Unreported),
				line("rollback → consumer past it, reported", d.Consumer.Reported),
				line("rollback → consumer past it, unreported", d.Consumer.Unreported),
			}
			return res
		}},
	{12, "cold statistics: each set-based statement on tables fresh from two mass `UPDATE`s, autovacuum off, never analysed",
		"the same statement at a batch of 1,000 and of 10,000, each on a fresh copy of the same cold tables (linear: 10 ×); the sweep's pass over 10,000 cold stuck rows against one bare `UPDATE` of them",
		"the 10,000 batch ≤ 12 × the 1,000 batch, for each statement; no plan node doing more rows than its batch allows",
		func(m Metrics, _ *Demo) Result {
			j := &judge{m: m}
			for _, s := range coldStatements {
				j.check(atMost(s.bench, s.key+"-big/small", s.name+":", 12, "%.1f × the small batch"))
			}
			j.check(atMost("BenchmarkColdStatistics", "excess-nodes", "plan nodes over the bound:", 0, "%.0f"))
			j.check(atMost("BenchmarkColdCheck", "excess-nodes", "in the check:", 0, "%.0f"))
			if v, ok := m.Get("BenchmarkColdStatistics", "sweep-pass/bare"); ok {
				j.res.Detail = append(j.res.Detail, fmt.Sprintf("the sweep's pass over the cold stuck rows (batches of 1,000): %.2f × one bare UPDATE of them", v))
			}
			j.detail("BenchmarkColdStatistics")
			j.detail("BenchmarkColdCheck")
			return j.res
		}},
	{13, "plain INSERT: `INSERT INTO outbox.events (topic, payload)` through the default allocator (the xid, then the sequence), notification off and on",
		"the bare `INSERT ... DEFAULT nextval` of row 8 in the same transaction shape, with fsync on (a throwaway durable cluster) and off (the test cluster)",
		"≤ 1.2 × the bare insert with fsync on; the fsync-off and notification ratios reported",
		func(m Metrics, _ *Demo) Result {
			j := &judge{m: m}
			j.check(atMost("BenchmarkInsert", "fsync-on-insert/bare", "fsync on:", 1.2, "%.2f × bare"))
			for _, arm := range []string{"fsync-off-insert", "fsync-on-insert-notify", "fsync-off-insert-notify"} {
				if v, ok := m.Get("BenchmarkInsert", arm+"/bare"); ok {
					j.res.Detail = append(j.res.Detail, fmt.Sprintf("%s: %.2f × bare", strings.ReplaceAll(arm, "-", " "), v))
				}
			}
			j.detail("BenchmarkInsert")
			return j.res
		}},
	{14, "relay: a backlog of 100,000 committed events to an SQS queue (fauxqs), one bounded pass at `RELAY_CONCURRENCY=4`",
		"a bare `SendMessageBatch` loop sending the same pre-built envelopes in calls of ten, with the same client and concurrency and no database (`sqstest.BareSend`, as `BenchmarkBareSend`'s baseline)",
		"≥ 0.7 × the bare loop's messages/s",
		limits(
			atLeast("BenchmarkRelayThroughput", "relay/bare", "", 0.7, "%.2f × the bare loop"))},
	{15, "relay: commit → message visible in an SQS queue, a watching relay on the template's settings (`RELAY_TICK=200ms`), no older transaction open",
		"one event committed every 20 to 120 ms, read by a consumer long-polling the queue",
		"p99 ≤ 1 s",
		limits(
			atMost("BenchmarkRelayLatency", "p99-ms", "p99", 1000, "%.0f ms"))},
	{16, "relay: a watching relay's idle tick, caught up at the head of tables of 100k and 10M events",
		"the same watching pass on each size",
		"statements per tick constant; the probe's buffers constant but for the primary key's depth (one page a B-tree level); database time per tick at 10M ≤ 1.5 × at 100k",
		func(m Metrics, _ *Demo) Result {
			j := &judge{m: m}
			j.check(within("BenchmarkRelayIdleTick", "statements/smallest-table", "statements per tick at 10M", "%.2f × at 100k", "within 1 ± 0.1", 0.9, 1.1))
			// A probe of the primary key reads one page per level of the
			// B-tree, which is one level deeper at 10M rows than at 100k:
			// everything else the tick reads is a row or two.
			small, ok1 := m.Get("BenchmarkRelayIdleTick", "probe-buffers@100000")
			large, ok2 := m.Get("BenchmarkRelayIdleTick", "probe-buffers@10000000")
			c := Check{Target: "≤ 1 more at 10M (the B-tree's one more level)", Missing: !ok1 || !ok2}
			if c.Missing {
				c.What = "the probe's buffers: not reported"
			} else {
				c.What = fmt.Sprintf("the probe's buffers %.0f at 100k, %.0f at 10M", small, large)
				c.OK = large-small <= 1
			}
			j.res.Checks = append(j.res.Checks, c)
			j.check(atMost("BenchmarkRelayIdleTick", "db-time/smallest-table", "database time per tick at 10M", 1.5, "%.2f × at 100k"))
			j.detail("BenchmarkRelayIdleTick")
			return j.res
		}},
	{17, "deliver: 10,000 pending deliveries to one SQS queue (fauxqs), one bounded pass at the template's defaults (`DELIVER_BATCH_LIMIT=100`, `DELIVER_CONCURRENCY=8`; also reported at `DELIVER_BATCH_LIMIT=1000`)",
		"a bare `SendMessageBatch` loop sending the same messages with the same client and concurrency, no database",
		"≥ 0.6 × the bare loop's messages/s",
		limits(
			atLeast("BenchmarkDeliverThroughput", "deliver/bare", "", 0.6, "%.2f × the bare loop"))},
	{18, "deliver: the claim statement's cost per batch of 100 beside acked history",
		"the same claim beside 10,000 and beside 1,000,000 acked rows, 1,000 pending, vacuumed",
		"the same buffers per batch (≤ 1.2 ×)",
		limits(
			atMost("BenchmarkClaimBesideHistory", "large/small", "buffers per batch beside 1M", 1.2, "%.2f × beside 10k"))},
	{19, "the latencies to beat, in the local stack on the template's settings (its schedules, grace, tick and the compensate event source's batch size, window and concurrency), no older transaction open",
		"a resident daemon's: obix's in-process filler closes a gap in about 2 s, Marten's async daemon in about 3 s",
		"reported rollback → placeholder p99 ≤ 0.5 s; unreported rollback → consumer past it p99 ≤ 1 s; the cost in compensate invocations per 1,000 reported rollbacks reported",
		func(_ Metrics, d *Demo) Result {
			var res Result
			if d == nil {
				res.Checks = []Check{{What: "the demo did not run", Target: "its summary", Missing: true}}
				return res
			}
			res.Checks = []Check{
				{What: fmt.Sprintf("reported p99 %.2f s", d.Placeholder.Reported.P99), Target: "≤ 0.5 s",
					OK: d.Placeholder.Reported.N > 0 && d.Placeholder.Reported.P99 <= 0.5},
				{What: fmt.Sprintf("unreported → consumer p99 %.2f s", d.Consumer.Unreported.P99), Target: "≤ 1 s",
					OK: d.Consumer.Unreported.N > 0 && d.Consumer.Unreported.P99 <= 1},
			}
			if n := d.Placeholder.Reported.N; n > 0 {
				res.Detail = append(res.Detail, fmt.Sprintf("compensate: %d invocations for %d reported rollbacks, %.0f per 1,000",
					d.Invocations["compensate"], n, 1000*float64(d.Invocations["compensate"])/float64(n)))
			}
			res.Detail = append(res.Detail, fmt.Sprintf("grace %.2f s, tick %.1f s; the demo of row 11", d.GraceS, d.TickS))
			return res
		}},
	{20, "the consumer side: commit → `Consume`'s handler with the library's defaults, polling (the notification off, `Poll` 1 s) and listening (the notification on, `Listen` set), one event committed every 20 to 120 ms, no older transaction open",
		"the same events and the same handler in both modes; the relay's commit → queue is row 15",
		"polling p99 ≤ 1 s (its poll period); listening p99 ≤ 0.1 s",
		limits(
			atMost("BenchmarkConsumeLatency", "poll-p99-ms", "polling p99", 1000, "%.0f ms"),
			atMost("BenchmarkConsumeLatency", "listen-p99-ms", "listening p99", 100, "%.1f ms"))},
}

// coldStatements are row 12's statements: the benchmark that runs each,
// the key of its metrics, and its name in the table.
var coldStatements = []struct{ bench, key, name string }{
	{"BenchmarkColdStatistics", "sweep-reset", "the sweep's reset"},
	{"BenchmarkColdStatistics", "prune-deliveries", "prune's delete of deliveries"},
	{"BenchmarkColdStatistics", "prune-events", "prune's delete of events"},
	{"BenchmarkColdCheck", "compensate-check", "compensate's check"},
	{"BenchmarkColdStatistics", "compensate-insert", "compensate's insert"},
	{"BenchmarkColdStatistics", "fill-insert", "the fill's insert"},
	{"BenchmarkColdStatistics", "fill-page-read", "the fill's page read"},
	{"BenchmarkColdStatistics", "read-events", "`read_events`"},
}

// PlansOf names, by row, the benchmarks whose logged plans its section
// shows.
var PlansOf = map[int][]string{12: {"BenchmarkColdStatistics", "BenchmarkColdCheck"}}

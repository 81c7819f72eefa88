package main

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// go test -json splits a result line: the name first, the figures when
// the benchmark ends.
const sampleJSON = `{"Action":"start","Package":"example/fill"}
{"Action":"output","Package":"example/fill","Output":"goos: linux\n"}
{"Action":"output","Package":"example/fill","Test":"BenchmarkFillBurst","Output":"BenchmarkFillBurst-2   \t"}
{"Action":"output","Package":"example/fill","Test":"BenchmarkFillBurst","Output":"       5\t4705868027 ns/op\t         1.000 cycles\t         0.7288 fill/limit\t        40.83 fill/loop\n"}
{"Action":"output","Package":"example/fill","Output":"BenchmarkFillWatching-2 \t 5\t 1 ns/op\t 2.2 statements/tick@100000\n"}
{"Action":"fail","Package":"example/sweep","Test":"BenchmarkResetStuck"}
`

func TestParseReadsSplitResultLines(t *testing.T) {
	m, _, failed, err := Parse(strings.NewReader(sampleJSON), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := m.Get("BenchmarkFillBurst", "fill/limit"); !ok || v != 0.7288 {
		t.Errorf("fill/limit = %v (%v), want 0.7288", v, ok)
	}
	if v, ok := m.Get("BenchmarkFillBurst", "fill/loop"); !ok || v != 40.83 {
		t.Errorf("fill/loop = %v (%v), want 40.83", v, ok)
	}
	if v, ok := m.Get("BenchmarkFillWatching", "statements/tick@100000"); !ok || v != 2.2 {
		t.Errorf("statements/tick@100000 = %v (%v), want 2.2", v, ok)
	}
	if len(failed) != 1 || failed[0] != "example/sweep BenchmarkResetStuck" {
		t.Errorf("failed = %v, want the sweep benchmark", failed)
	}
}

func TestARowMetOnlyWhenEveryTargetIs(t *testing.T) {
	// the burst: ≥ 0.6 × the limit, ≥ 20 × the loop
	verdicts(t, 1, []verdict{
		{"0.73 × the limit and 40 × the loop", Metrics{"BenchmarkFillBurst": {"fill/limit": 0.73, "fill/loop": 40}}, nil, true},
		{"0.41 × the limit", Metrics{"BenchmarkFillBurst": {"fill/limit": 0.41, "fill/loop": 40}}, nil, false},
		{"nothing reported", Metrics{}, nil, false},
	})
}

func TestUpperBoundsAreUpper(t *testing.T) {
	// cold start ≤ 30 ms, binaries ≤ 12 MB
	verdicts(t, 10, []verdict{
		{"20 ms and 11.9 MB", Metrics{"BenchmarkColdStart": {"slowest-init-ms": 20}, "BenchmarkBinarySize": {"largest-bytes": 11_862_178}}, nil, true},
		{"a 13.4 MB binary", Metrics{"BenchmarkColdStart": {"slowest-init-ms": 20}, "BenchmarkBinarySize": {"largest-bytes": 13_369_506}}, nil, false},
	})
}

func TestLatencyRowReadsTheDemo(t *testing.T) {
	row := Rows[10]
	d := &Demo{OK: true, GraceS: 2, TickS: 0.5}
	d.Placeholder.Reported = Latency{N: 10, P99: 0.9}
	d.Placeholder.Unreported = Latency{N: 10, P99: 3.4}
	if !row.Judge(nil, d).Met() {
		t.Error("p99 0.9 s and 3.4 s against 1 s and 3.5 s: not met, want met")
	}
	d.Placeholder.Unreported.P99 = 8.3
	if row.Judge(nil, d).Met() {
		t.Error("unreported p99 8.3 s: met, want missed")
	}
	if row.Judge(nil, nil).Met() {
		t.Error("no demo: met, want missed")
	}
}

func TestRenderHasEveryRowAndTheMachine(t *testing.T) {
	var buf bytes.Buffer
	Render(&buf, Env{Machine: "AMD EPYC, 2 cores", LoadBefore: "0.50, 0.40, 0.30"}, Metrics{}, nil, nil, nil)
	out := buf.String()
	for _, want := range []string{"AMD EPYC, 2 cores", "0.50, 0.40, 0.30", "| 1 |", "| 11 |", "| 12 |", "| 13 |", "## Fixes"} {
		if !strings.Contains(out, want) {
			t.Errorf("BENCHMARKS.md lacks %q", want)
		}
	}
}

func TestParseKeepsLoggedPlans(t *testing.T) {
	const out = `{"Action":"output","Package":"example/coldplan","Output":"--- BENCH: BenchmarkColdStatistics-2\n"}
{"Action":"output","Package":"example/coldplan","Output":"    bench_test.go:133: plan BenchmarkColdStatistics sweep-reset@1000: Limit[LockRows[Index Scan deliveries_delivered_idx]]\n"}
{"Action":"output","Package":"example/coldplan","Output":"    bench_test.go:138: sweep-reset@1000: not a plan\n"}
`
	_, plans, _, err := Parse(strings.NewReader(out), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	got := plans["BenchmarkColdStatistics"]
	if want := "sweep-reset@1000: Limit[LockRows[Index Scan deliveries_delivered_idx]]"; len(got) != 1 || got[0] != want {
		t.Errorf("plans = %q, want [%q]", got, want)
	}
	var buf bytes.Buffer
	Render(&buf, Env{}, Metrics{}, plans, nil, nil)
	if !strings.Contains(buf.String(), "sweep-reset@1000: `Limit[LockRows[Index Scan deliveries_delivered_idx]]`") {
		t.Error("BENCHMARKS.md lacks the logged plan in row 12's section")
	}
}

func TestColdRowMetOnlyWhenEveryStatementIsLinear(t *testing.T) {
	row := Rows[11]
	linear := Metrics{"BenchmarkColdStatistics": {"excess-nodes": 0}, "BenchmarkColdCheck": {"excess-nodes": 0}}
	for _, s := range coldStatements {
		linear[s.bench][s.key+"-big/small"] = 10.4
	}
	if !row.Judge(linear, nil).Met() {
		t.Error("every statement 10.4 × and no node over its bound: not met, want met")
	}
	quadratic := Metrics{"BenchmarkColdStatistics": {}, "BenchmarkColdCheck": {}}
	for b, v := range linear {
		for k, x := range v {
			quadratic[b][k] = x
		}
	}
	quadratic["BenchmarkColdStatistics"]["sweep-reset-big/small"] = 43
	if row.Judge(quadratic, nil).Met() {
		t.Error("the reset at 43 ×: met, want missed")
	}
	over := Metrics{"BenchmarkColdStatistics": {"excess-nodes": 2}, "BenchmarkColdCheck": {"excess-nodes": 0}}
	for _, s := range coldStatements {
		over[s.bench][s.key+"-big/small"] = 10
	}
	if row.Judge(over, nil).Met() {
		t.Error("two plan nodes over their bound: met, want missed")
	}
}

func TestInsertRowJudgesTheFsyncOnRatio(t *testing.T) {
	// the plain INSERT: ≤ 1.2 × bare with fsync on
	verdicts(t, 13, []verdict{
		{"1.09 × bare with fsync on (fsync off is reported, not judged)", Metrics{"BenchmarkInsert": {"fsync-on-insert/bare": 1.09, "fsync-off-insert/bare": 1.6}}, nil, true},
		{"1.31 × bare with fsync on", Metrics{"BenchmarkInsert": {"fsync-on-insert/bare": 1.31}}, nil, false},
	})
}

// The relay's rows: throughput at least 0.7 × the bare loop, p99 at most
// a second, and the idle tick's statements and buffers within a tenth of
// constant from 100k to 10M.
func TestRelayRowsJudgeTheirTargets(t *testing.T) {
	verdicts(t, 14, []verdict{
		{"0.74 × the bare loop", Metrics{"BenchmarkRelayThroughput": {"relay/bare": 0.74}}, nil, true},
		{"0.66 × the bare loop", Metrics{"BenchmarkRelayThroughput": {"relay/bare": 0.66}}, nil, false},
	})
	verdicts(t, 15, []verdict{
		{"p99 203 ms", Metrics{"BenchmarkRelayLatency": {"p99-ms": 203}}, nil, true},
		{"p99 1.4 s", Metrics{"BenchmarkRelayLatency": {"p99-ms": 1400}}, nil, false},
	})
	verdicts(t, 16, []verdict{
		{"a flat idle tick, one B-tree level deeper", Metrics{"BenchmarkRelayIdleTick": {"statements/smallest-table": 1, "probe-buffers@100000": 5, "probe-buffers@10000000": 6, "db-time/smallest-table": 1.1}}, nil, true},
		{"the probe's buffers 5 → 9", Metrics{"BenchmarkRelayIdleTick": {"statements/smallest-table": 1, "probe-buffers@100000": 5, "probe-buffers@10000000": 9, "db-time/smallest-table": 1.1}}, nil, false},
		{"the buffers not reported", Metrics{"BenchmarkRelayIdleTick": {"statements/smallest-table": 1, "db-time/smallest-table": 1}}, nil, false},
	})
}

func TestLatencyRowJudgesTheReportedAndUnreportedP99(t *testing.T) {
	i := slices.IndexFunc(Rows, func(r Row) bool { return r.N == 19 })
	if i < 0 {
		t.Fatal("no row 19")
	}
	row := Rows[i]
	fast := &Demo{}
	fast.Placeholder.Reported = Latency{N: 100, P99: 0.4}
	fast.Consumer.Unreported = Latency{N: 50, P99: 0.9}
	fast.Invocations = map[string]int{"compensate": 20}
	got := row.Judge(nil, fast)
	if !got.Met() {
		t.Error("reported 0.4 s and unreported 0.9 s: not met, want met")
	}
	if !slices.ContainsFunc(got.Detail, func(s string) bool { return strings.Contains(s, "200 per 1,000") }) {
		t.Errorf("detail %q lacks the invocations per 1,000 reported rollbacks (200)", got.Detail)
	}
	windowed := *fast
	windowed.Placeholder.Reported.P99 = 0.83
	if row.Judge(nil, &windowed).Met() {
		t.Error("reported p99 0.83 s: met, want missed")
	}
	graced := *fast
	graced.Consumer.Unreported.P99 = 2.8
	if row.Judge(nil, &graced).Met() {
		t.Error("unreported p99 2.8 s: met, want missed")
	}
	if row.Judge(nil, nil).Met() {
		t.Error("no demo: met, want missed")
	}
}

// The deliver rows: throughput at least 0.6 × the bare loop, the claim's
// buffers beside 1M acked rows at most 1.2 × beside 10k.
func TestDeliverRowsJudgeTheirTargets(t *testing.T) {
	verdicts(t, 17, []verdict{
		{"0.63 × the bare loop", Metrics{"BenchmarkDeliverThroughput": {"deliver/bare": 0.63}}, nil, true},
		{"0.40 × the bare loop", Metrics{"BenchmarkDeliverThroughput": {"deliver/bare": 0.40}}, nil, false},
	})
	verdicts(t, 18, []verdict{
		{"claim 1.11 × beside 1M", Metrics{"BenchmarkClaimBesideHistory": {"large/small": 1.11}}, nil, true},
		{"claim 3 × beside 1M", Metrics{"BenchmarkClaimBesideHistory": {"large/small": 3}}, nil, false},
		{"the claim not reported", Metrics{}, nil, false},
	})
}

// The consumer row: polling p99 within its poll period, listening p99
// within a tenth of a second.
func TestConsumeRowJudgesBothModes(t *testing.T) {
	verdicts(t, 20, []verdict{
		{"polling 908 ms, listening 7 ms", Metrics{"BenchmarkConsumeLatency": {"poll-p99-ms": 908, "listen-p99-ms": 7}}, nil, true},
		{"listening 400 ms", Metrics{"BenchmarkConsumeLatency": {"poll-p99-ms": 908, "listen-p99-ms": 400}}, nil, false},
		{"not reported", Metrics{}, nil, false},
	})
}

// verdict is one run of a row's benchmarks and whether it meets the row.
type verdict struct {
	name string
	m    Metrics
	d    *Demo
	met  bool
}

// verdicts judges each case with row n, one subtest a case.
func verdicts(t *testing.T, n int, cases []verdict) {
	t.Helper()
	i := slices.IndexFunc(Rows, func(r Row) bool { return r.N == n })
	if i < 0 {
		t.Fatalf("no row %d", n)
	}
	word := map[bool]string{true: "met", false: "missed"}
	for _, c := range cases {
		t.Run(fmt.Sprintf("row %d/%s", n, c.name), func(t *testing.T) {
			if got := Rows[i].Judge(c.m, c.d).Met(); got != c.met {
				t.Errorf("%s: %s, want %s", c.name, word[got], word[c.met])
			}
		})
	}
}

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Metrics are every benchmark's reported metrics: name (without the
// -GOMAXPROCS suffix) → unit → value. ns/op is among them.
type Metrics map[string]map[string]float64

// Plans are the plans benchmarks logged: benchmark name → one line per
// statement and batch, "statement@batch: node tree", in the order logged.
// A benchmark logs one as "plan <BenchmarkName> <statement@batch>: <tree>".
type Plans map[string][]string

// planLine is a logged plan, after the test file's position go test
// puts before every log line.
var planLine = regexp.MustCompile(`^(?:\S+\.go:\d+: )?plan (Benchmark\S+) (\S+): (.+)$`)

// Get is one metric, and whether the run reported it.
func (m Metrics) Get(bench, unit string) (float64, bool) {
	v, ok := m[bench][unit]
	return v, ok
}

// testEvent is one line of `go test -json`.
type testEvent struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// resultLine is a benchmark's result: its name, the iterations, then
// value-unit pairs separated by tabs.
var resultLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.+)$`)

// Parse reads `go test -json -bench` output and returns the metrics, the
// plans the benchmarks logged, and the packages or tests that failed (a
// benchmark that failed reported nothing worth rendering). log receives
// every output line, for the operator to follow a long run.
func Parse(r io.Reader, log io.Writer) (Metrics, Plans, []string, error) {
	m := Metrics{}
	plans := Plans{}
	var failed []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	// A result line can reach us in pieces: go test writes the name, then
	// the figures once the benchmark ends.
	partial := map[string]string{}
	for sc.Scan() {
		var ev testEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			fmt.Fprintln(log, sc.Text()) // not JSON: the build's own output
			continue
		}
		switch ev.Action {
		case "fail":
			what := ev.Package
			if ev.Test != "" {
				what += " " + ev.Test
			}
			failed = append(failed, what)
		case "output":
			fmt.Fprint(log, ev.Output)
			key := ev.Package
			text := partial[key] + ev.Output
			if !strings.HasSuffix(text, "\n") {
				partial[key] = text
				continue
			}
			delete(partial, key)
			for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
				name, values, ok := parseResult(line)
				if ok {
					m[name] = values
				}
				if g := planLine.FindStringSubmatch(strings.TrimSpace(line)); g != nil {
					plans[g[1]] = append(plans[g[1]], g[2]+": "+g[3])
				}
			}
		}
	}
	return m, plans, failed, sc.Err()
}

// parseResult reads one benchmark result line.
func parseResult(line string) (string, map[string]float64, bool) {
	g := resultLine.FindStringSubmatch(strings.TrimSpace(line))
	if g == nil {
		return "", nil, false
	}
	fields := strings.Fields(g[2])
	if len(fields)%2 != 0 {
		return "", nil, false
	}
	values := map[string]float64{}
	for i := 0; i < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			return "", nil, false
		}
		values[fields[i+1]] = v
	}
	return g[1], values, true
}

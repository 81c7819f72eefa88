// Package benchkit is what the benchmarks share: sizes that shrink under
// -short (make test runs every benchmark once, small, so none can rot),
// arms run side by side in alternating order, and medians.
//
// A benchmark here compares the code with a baseline and with the
// database's own limit in the same process and the same run: it times
// each arm once per repetition, rotating which arm goes first so a warm
// cache or a neighbour's load favours none of them, and reports the
// median of each arm and their ratios with b.ReportMetric. Nothing here
// asserts a time: infra/cmd/bench reads the reported metrics and judges
// them against the targets in BENCHMARKS.md.
package benchkit

import (
	"slices"
	"testing"
	"time"
)

// Size is full for `make bench` and short under -short (make test's one
// small repetition).
func Size[T any](full, short T) T {
	if testing.Short() {
		return short
	}
	return full
}

// Median of the samples (the upper one of an even count), 0 for none. A
// median, not a mean: on a shared machine one repetition can stall on a
// checkpoint or a neighbour, and one outlier must not decide a ratio.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Arm is one side of a comparison: Run does the work once and returns
// how long the measured part took (setup inside Run is not counted).
type Arm struct {
	Name string
	Run  func() time.Duration
}

// Samples are the times of every arm, by name, one per repetition.
type Samples map[string][]float64

// Median is the arm's median in seconds.
func (s Samples) Median(name string) float64 { return Median(s[name]) }

// Alternate runs one repetition of every arm, starting with arm rep mod
// len(arms) and wrapping around, and records each time in seconds.
func (s Samples) Alternate(rep int, arms ...Arm) {
	for i := range arms {
		a := arms[(rep+i)%len(arms)]
		s[a.Name] = append(s[a.Name], a.Run().Seconds())
	}
}

// Repeat runs one repetition of every arm (Alternate) for each turn of
// b's loop, the first arm moving on by one each time, and returns the
// times.
func Repeat(b *testing.B, arms ...Arm) Samples {
	s := Samples{}
	for rep := 0; b.Loop(); rep++ {
		s.Alternate(rep, arms...)
	}
	return s
}

// CompareRates times base and each arm alternately (Alternate) for b.N
// repetitions, each doing n messages, and reports each one's median rate
// as <name>-msgs/s and each arm's over base's as <arm>/<base>.
func CompareRates(b *testing.B, n int, base Arm, arms ...Arm) {
	samples := Samples{}
	all := append([]Arm{base}, arms...)
	b.ResetTimer()
	for rep := range b.N {
		samples.Alternate(rep, all...)
	}
	b.StopTimer()
	baseRate := float64(n) / samples.Median(base.Name)
	b.ReportMetric(baseRate, base.Name+"-msgs/s")
	for _, a := range arms {
		rate := float64(n) / samples.Median(a.Name)
		b.ReportMetric(rate, a.Name+"-msgs/s")
		b.ReportMetric(rate/baseRate, a.Name+"/"+base.Name)
	}
}

// ComparePooler times one pass straight to the server (direct) and
// through PgBouncer (pooled) alternately (Repeat), and reports each one's
// median as direct-ms and pgbouncer-ms, and pgbouncer/direct.
func ComparePooler(b *testing.B, direct, pooled func() time.Duration) {
	s := Repeat(b, Arm{Name: "direct", Run: direct}, Arm{Name: "pgbouncer", Run: pooled})
	d, p := s.Median("direct"), s.Median("pgbouncer")
	b.ReportMetric(d*1000, "direct-ms")
	b.ReportMetric(p*1000, "pgbouncer-ms")
	b.ReportMetric(p/d, "pgbouncer/direct")
}

// Timed runs f and returns how long it took.
func Timed(f func()) time.Duration {
	start := time.Now()
	f()
	return time.Since(start)
}

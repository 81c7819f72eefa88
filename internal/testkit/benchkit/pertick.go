package benchkit

import (
	"fmt"
	"testing"
	"time"
)

// PerTick is what the watching benchmarks measure per table size: each
// pass's statements per tick and database time per tick, one sample per
// repetition.
type PerTick struct {
	stmts, dbNS map[int64][]float64
}

// NewPerTick is an empty measurement.
func NewPerTick() *PerTick {
	return &PerTick{stmts: map[int64][]float64{}, dbNS: map[int64][]float64{}}
}

// Record notes one pass at size n that sent statements in ticks ticks and
// spent db in the database, and returns the database time per tick (the
// arm's timing).
func (p *PerTick) Record(n, statements int64, ticks int, db time.Duration) time.Duration {
	p.stmts[n] = append(p.stmts[n], float64(statements)/float64(ticks))
	perTick := db / time.Duration(ticks)
	p.dbNS[n] = append(p.dbNS[n], float64(perTick))
	return perTick
}

// Statements is the median statements per tick at size n.
func (p *PerTick) Statements(n int64) float64 { return Median(p.stmts[n]) }

// Report reports, per size, the median statements and database
// milliseconds per tick, and each at the largest size over the smallest
// (the targets: constant whatever the table's size).
func (p *PerTick) Report(b *testing.B, sizes []int64) {
	small, large := sizes[0], sizes[len(sizes)-1]
	for _, n := range sizes {
		b.ReportMetric(p.Statements(n), fmt.Sprintf("statements/tick@%d", n))
		b.ReportMetric(Median(p.dbNS[n])/1e6, fmt.Sprintf("db-ms/tick@%d", n))
	}
	b.ReportMetric(p.Statements(large)/p.Statements(small), "statements/smallest-table")
	b.ReportMetric(Median(p.dbNS[large])/Median(p.dbNS[small]), "db-time/smallest-table")
}

// Each is one arm per size.
func Each(sizes []int64, arm func(n int64) Arm) []Arm {
	arms := make([]Arm, 0, len(sizes))
	for _, n := range sizes {
		arms = append(arms, arm(n))
	}
	return arms
}

package benchkit

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// Latencies measures commit → arrival per event: the committing side
// records each sequence as it commits, the reading side each one as it
// arrives, from any goroutine.
type Latencies struct {
	mu        sync.Mutex
	committed map[int64]time.Time
	arrived   map[int64]time.Time
}

// NewLatencies is an empty measurement.
func NewLatencies() *Latencies {
	return &Latencies{committed: map[int64]time.Time{}, arrived: map[int64]time.Time{}}
}

// Arrived records that seq reached the reader at at.
func (l *Latencies) Arrived(seq int64, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.arrived[seq] = at
}

// CommitPaced commits events one at a time through commit (which returns
// the sequence it committed), one every 20 to 120 ms: a steady trickle
// with no older transaction open, the case a latency target is about.
func (l *Latencies) CommitPaced(events int, commit func(i int) int64) {
	for i := range events {
		seq := commit(i)
		l.mu.Lock()
		l.committed[seq] = time.Now()
		l.mu.Unlock()
		time.Sleep(time.Duration(20+rand.IntN(100)) * time.Millisecond)
	}
}

// Wait returns once events have arrived or within has passed, whichever
// is first; Millis then names any that did not arrive.
func (l *Latencies) Wait(events int, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		l.mu.Lock()
		n := len(l.arrived)
		l.mu.Unlock()
		if n >= events || time.Now().After(deadline) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Millis is each committed event's commit → arrival latency in
// milliseconds; a committed event that never arrived fails the benchmark
// with missing (a format taking the sequence).
func (l *Latencies) Millis(b *testing.B, missing string) []float64 {
	b.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []float64
	for seq, c := range l.committed {
		a, ok := l.arrived[seq]
		if !ok {
			b.Fatalf(missing, seq)
		}
		out = append(out, float64(a.Sub(c).Microseconds())/1000)
	}
	return out
}

// Percentile of the samples at p in [0, 1] (the nearest rank at or above
// p), 0 for none.
func Percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

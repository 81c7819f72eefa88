package main

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
)

// ledger is the workload's own record of what it did, kept apart from the
// database so the verdict compares the two: what the writers know they
// committed and abandoned against what the consumer and the functions saw.
type ledger struct {
	mu        sync.Mutex
	committed map[int64]bool
	// committedAt is when each committed event's COMMIT returned to its
	// writer: the start of its commit → queue latency.
	committedAt map[int64]time.Time
	abandoned   map[int64]rollback
	errs        []string
	errCount    int
	publishedN  int64
	// held are the long transactions the holder kept open: they hold the
	// xid horizon back, so the fill's latency bound depends on them.
	held []local.Interval

	committedN, reportedN, unreportedN atomic.Int64
	// lostAcks counts deliveries pushed whose answer the webhook dropped (or whose
	// ack lost a race): each must come back exactly once through the sweep.
	lostAcks atomic.Int64
	enqueued atomic.Int64
}

// rollback is one abandoned sequence: when the client rolled it back and
// whether a report was sent for it.
type rollback struct {
	at       time.Time
	reported bool
	how      string
}

func (l *ledger) hold(begin, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.held = append(l.held, local.Interval{Begin: begin, End: end})
}

func newLedger() *ledger {
	return &ledger{committed: map[int64]bool{}, committedAt: map[int64]time.Time{}, abandoned: map[int64]rollback{}}
}

func (l *ledger) commit(seqs []int64) {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range seqs {
		l.committed[s] = true
		l.committedAt[s] = now
	}
	l.publishedN += int64(len(seqs))
	l.committedN.Add(int64(len(seqs)))
}

func (l *ledger) abandon(seqs []int64, at time.Time, reported bool, how string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range seqs {
		l.abandoned[s] = rollback{at: at, reported: reported, how: how}
	}
	l.publishedN += int64(len(seqs))
	if reported {
		l.reportedN.Add(int64(len(seqs)))
	} else {
		l.unreportedN.Add(int64(len(seqs)))
	}
}

// fail records an unexpected error (the first few are kept for the verdict).
func (l *ledger) fail(what string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errCount++
	if len(l.errs) < 5 {
		l.errs = append(l.errs, fmt.Sprintf("%s: %v", what, err))
	}
}

func (l *ledger) published() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.publishedN
}

// commitTimes is when each committed event's COMMIT returned, after the
// workload stopped.
func (l *ledger) commitTimes() map[int64]time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committedAt
}

// snapshot copies the sets for the verdict, after the workload stopped.
func (l *ledger) snapshot() (committed map[int64]bool, abandoned map[int64]rollback, held []local.Interval, errCount int, errs []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.committed, l.abandoned, append([]local.Interval(nil), l.held...), l.errCount, append([]string(nil), l.errs...)
}

package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/outboxkeeper/outboxkeeper/infra/local"
)

// ledger is the run's own record of what it did, kept apart from the
// database so the judge can compare the two: what the writers know they
// committed and abandoned, the transactions and outages that may hold the
// fill back, the hostile reports sent and the faults injected.
type ledger struct {
	mu sync.Mutex
	// committed maps each committed sequence to its payload.
	committed map[int64]string
	// xidOf is the writer's xid of committed sequences whose writer knows
	// it, for hostile reports naming them.
	xidOf map[int64]uint64
	// abandoned maps each sequence that can never commit to when its
	// writer gave it up and whether it was reported.
	abandoned map[int64]abandonment
	// inDoubt: a COMMIT whose answer was lost (the server went away). The
	// sequence ends up committed or filled; either is correct.
	inDoubt map[int64]string
	// blockers are intervals during which the fill may be unable to prove
	// or to write: transactions held open, locks on fill_state, the
	// restart, the blind moment after a short-timeout invocation.
	blockers []local.Interval
	// faults and hostile reports by kind; errors by where they happened.
	faults, hostile map[string]int
	faultLog        []faultAt
	// hostileByID maps each hostile report's message id to its kind, so
	// the DLQ's contents (which name it in source_message_id) can be
	// counted by kind, and a missing one named.
	hostileByID map[string]string
	errs        map[string]int
	firstErrs   []string

	commits, rollbacks, reportedRollbacks, killed int
}

// abandonment is one sequence that can never commit.
type abandonment struct {
	at       time.Time
	reported bool
	how      string
}

func newLedger() *ledger {
	return &ledger{
		committed: map[int64]string{}, xidOf: map[int64]uint64{}, abandoned: map[int64]abandonment{},
		inDoubt: map[int64]string{}, faults: map[string]int{}, hostile: map[string]int{}, hostileByID: map[string]string{}, errs: map[string]int{},
	}
}

func (l *ledger) commit(seqs []int64, payloads []string, xid uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range seqs {
		l.committed[s] = payloads[i]
		if xid != 0 {
			l.xidOf[s] = xid
		}
	}
	l.commits++
}

func (l *ledger) abandon(seqs []int64, at time.Time, reported bool, how string) {
	if len(seqs) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range seqs {
		l.abandoned[s] = abandonment{at: at, reported: reported, how: how}
	}
	l.rollbacks++
	if reported {
		l.reportedRollbacks++
	}
	if how == "killed" {
		l.killed++
	}
}

func (l *ledger) doubt(seqs []int64, payloads []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range seqs {
		l.inDoubt[s] = payloads[i]
	}
}

func (l *ledger) block(begin, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blockers = append(l.blockers, local.Interval{Begin: begin, End: end})
}

// blind records a moment nobody watched: a sequence given up during it is
// first seen, and its grace starts, at end.
func (l *ledger) blind(begin, end time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blockers = append(l.blockers, local.Interval{Begin: begin, End: end, Blind: true})
}

func (l *ledger) fault(kind string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults[kind]++
	l.faultLog = append(l.faultLog, faultAt{kind: kind, at: time.Now()})
}

// faultAt is one injected fault, for explaining a late fill.
type faultAt struct {
	kind string
	at   time.Time
}

// faultsBetween names the faults injected in [from, to], relative to
// start (the caller holds l.mu).
func (l *ledger) faultsBetween(from, to, start time.Time) string {
	var out []string
	for _, f := range l.faultLog {
		if !f.at.Before(from) && !f.at.After(to) {
			out = append(out, fmt.Sprintf("%s at +%.3fs", f.kind, f.at.Sub(start).Seconds()))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func (l *ledger) sentHostile(kind, messageID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hostile[kind]++
	l.hostileByID[messageID] = kind
}

// fail records an error the workload met. Errors are expected while the
// faults run (a killed connection, the restart); the judge reports them
// and fails only on the kinds that mean a broken promise.
func (l *ledger) fail(where string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs[where]++
	if len(l.firstErrs) < 8 {
		l.firstErrs = append(l.firstErrs, fmt.Sprintf("%s: %v", where, err))
	}
}

// committedSample returns a committed sequence whose writer's xid is
// known, for a hostile report naming it.
func (l *ledger) committedSample() (int64, uint64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for s, x := range l.xidOf {
		return s, x, true
	}
	return 0, 0, false
}

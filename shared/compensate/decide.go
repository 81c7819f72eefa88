package compensate

import (
	"fmt"

	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// Writer statuses as pg_xact_status spells them, plus the two the check
// statement adds: StatusFuture (at or above the snapshot's xmax and held by
// no running transaction: never assigned, so pg_xact_status was not called)
// and StatusTooOld (pg_xact_status returned NULL: the xid is older than the
// commit log kept, so it ended long ago).
const (
	StatusCommitted  = "committed"
	StatusAborted    = "aborted"
	StatusInProgress = "in progress"
	StatusFuture     = "future"
	StatusTooOld     = "too old"
)

// Check is what the database says about one batch: read in one statement.
type Check struct {
	// Head is the allocation head: no sequence above it was ever handed out.
	Head int64
	// XMax is pg_snapshot_xmax(pg_current_snapshot()): the latest completed
	// xid + 1 when the check ran (not the next xid: see checkSQL). No xid at
	// or above it had finished.
	XMax uint64
	// Status is the writer status of every distinct reported xid.
	Status map[uint64]string
}

// future lists the xids the check found in the future, for the re-check.
func (c Check) future() []uint64 {
	var out []uint64
	for x, status := range c.Status {
		if status == StatusFuture {
			out = append(out, x)
		}
	}
	return out
}

// Outcome is what happens to one message: decided for each parsed report
// (Filled, Deferred, Dropped, Invalid), and Failed when carrying it out
// needed the database or SQS and they failed.
type Outcome int

const (
	// Filled: every reported sequence still missing can never be written
	// by its writer (§3.4); they go into the batch's placeholder insert,
	// and the message is done.
	Filled Outcome = iota + 1
	// Deferred: the writer still runs; the message comes back after
	// COMPENSATE_DEFER and is decided again.
	Deferred
	// Dropped: the writer still runs after COMPENSATE_MAX_DEFERRALS
	// receives. A long transaction is not bad input; the message is
	// removed and the fill function proves and fills the sequences after
	// the writer ends.
	Dropped
	// Invalid: bad input, forwarded to the DLQ and never retried.
	Invalid
	// Failed: reported failed for SQS to hand out again (database or DLQ
	// unavailable, or bad input with no DLQ configured); the queue's
	// redrive policy moves it eventually.
	Failed
)

var outcomeNames = map[Outcome]string{
	Filled: "filled", Deferred: "deferred", Dropped: "dropped", Invalid: "invalid", Failed: "failed",
}

func (o Outcome) String() string {
	if s, ok := outcomeNames[o]; ok {
		return s
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// MarshalText makes an Outcome its name in the response and the log line.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// Decide is the whole per-message decision, given the batch's database
// check and how often SQS has handed this message out. The reason is empty
// for Filled.
func Decide(r report.Report, receiveCount int, c Check, maxDeferrals int) (Outcome, string) {
	// Sequences are sorted ascending by report.Parse, so the last is the
	// highest. Above the head means never allocated: filling it would
	// steal a sequence a future writer is about to be handed (§3.5).
	if n := len(r.Sequences); n > 0 && r.Sequences[n-1] > c.Head {
		return Invalid, fmt.Sprintf("sequence %d is above the allocation head %d: it was never allocated", r.Sequences[n-1], c.Head)
	}
	if !r.HasXID {
		// Owner-trusted, as in the reference: only the writer itself knows
		// these sequences, and the insert never overwrites a row (§3.4).
		return Filled, ""
	}
	switch status := c.Status[r.XID]; status {
	case StatusCommitted, StatusAborted, StatusTooOld:
		// A finished transaction never writes again: whatever it reported
		// that is still missing stays missing for ever.
		return Filled, ""
	case StatusInProgress:
		if receiveCount >= maxDeferrals {
			return Dropped, fmt.Sprintf("writer xid %d still in progress after %d receives; left to the fill function, which proves and fills these sequences once it ends", r.XID, receiveCount)
		}
		return Deferred, fmt.Sprintf("writer xid %d still in progress", r.XID)
	case StatusFuture:
		return Invalid, fmt.Sprintf("xid %d is in the future: no transaction has had it (none finished at or above %d, and none running holds it)", r.XID, c.XMax)
	default:
		// Not a status this code knows: never fill on a guess. Deferring
		// lets the message retry and, at worst, reach the fill function.
		return Deferred, fmt.Sprintf("writer xid %d has unknown status %q", r.XID, status)
	}
}

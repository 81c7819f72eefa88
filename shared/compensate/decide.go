package compensate

import (
	"fmt"
	"strconv"

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

// Verdict is what the handler does with one parsed report.
type Verdict int

const (
	// Fill: every reported sequence still missing can never be written by
	// its writer (§3.4), so it goes into the batch's placeholder insert.
	Fill Verdict = iota + 1
	// Defer: the writer still runs; the message comes back after
	// COMPENSATE_DEFER and is decided again.
	Defer
	// Drop: the writer still runs after COMPENSATE_MAX_DEFERRALS receives.
	// A long transaction is not bad input; the message is removed and the
	// fill function proves and fills the sequences after the writer ends.
	Drop
	// Invalid: bad input, forwarded to the DLQ and never retried.
	Invalid
)

func (v Verdict) String() string {
	switch v {
	case Fill:
		return "fill"
	case Defer:
		return "defer"
	case Drop:
		return "drop"
	case Invalid:
		return "invalid"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Decide is the whole per-message decision of DESIGN §5, given the batch's
// database check and how often SQS has handed this message out. The
// reason is empty for Fill.
func Decide(r report.Report, receiveCount int, c Check, maxDeferrals int) (Verdict, string) {
	// Sequences are sorted ascending by report.Parse, so the last is the
	// highest. Above the head means never allocated: filling it would
	// steal a sequence a future writer is about to be handed (§3.5).
	if n := len(r.Sequences); n > 0 && r.Sequences[n-1] > c.Head {
		return Invalid, fmt.Sprintf("sequence %d is above the allocation head %d: it was never allocated", r.Sequences[n-1], c.Head)
	}
	if !r.HasXID {
		// Owner-trusted, as in the reference: only the writer itself knows
		// these sequences, and the insert never overwrites a row (§3.4).
		return Fill, ""
	}
	switch status := c.Status[r.XID]; status {
	case StatusCommitted, StatusAborted, StatusTooOld:
		// A finished transaction never writes again: whatever it reported
		// that is still missing stays missing for ever.
		return Fill, ""
	case StatusInProgress:
		if receiveCount >= maxDeferrals {
			return Drop, fmt.Sprintf("writer xid %d still in progress after %d receives; left to the fill function, which proves and fills these sequences once it ends", r.XID, receiveCount)
		}
		return Defer, fmt.Sprintf("writer xid %d still in progress", r.XID)
	case StatusFuture:
		return Invalid, fmt.Sprintf("xid %d is in the future: no transaction has had it (none finished at or above %d, and none running holds it)", r.XID, c.XMax)
	default:
		// Not a status this code knows: never fill on a guess. Deferring
		// lets the message retry and, at worst, reach the fill function.
		return Defer, fmt.Sprintf("writer xid %d has unknown status %q", r.XID, status)
	}
}

// future lists the xids the check found in the future, for the re-check.
func (c Check) future() []string {
	var out []string
	for x, status := range c.Status {
		if status == StatusFuture {
			out = append(out, strconv.FormatUint(x, 10))
		}
	}
	return out
}

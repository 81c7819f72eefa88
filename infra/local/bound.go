package local

import "time"

// Interval is when something began and ended: a transaction held open, a
// lock, an outage.
type Interval struct {
	Begin, End time.Time
	// Blind says nobody watched during it (the watching invocation ended
	// with no successor until the schedule's next one): a sequence given
	// up then is first seen at End, so its grace starts there.
	Blind bool
}

// FillBound is when the fill promises a placeholder for a sequence whose
// writer gave it up at t: within the grace and a tick, unless something
// that began before then could hold the proof back (a transaction older
// than the marker that can cover the sequence, a lock on the fill's state,
// the database away); then within a tick of its end. It is taken to a
// fixed point: once one blocker has pushed the marker past its end, another
// that began before that end can hold the next one. After a blind
// interval the bound is its end plus the grace and a tick. The caller adds
// its allowance for the statements in between.
func FillBound(t time.Time, grace, tick time.Duration, blockers []Interval) time.Time {
	grace = max(grace, 0)
	due := t.Add(grace + tick)
	for moved := true; moved; {
		moved = false
		for _, b := range blockers {
			after := b.End.Add(tick)
			if b.Blind {
				after = after.Add(grace)
			}
			if b.Begin.Before(due) && b.End.After(t) && after.After(due) {
				due, moved = after, true
			}
		}
	}
	return due
}

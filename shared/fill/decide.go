package fill

import "time"

// The decisions of a pass, as pure functions of what it read and the time:
// unit tested without a database (decide_test.go). The pass in fill.go only
// reads, calls these, and writes.

// initialWatermark anchors the first run. Sequences start at 1, so an
// outbox whose first present row (head+1 for an empty table) lies within one
// page of the start is young: whatever is missing below it was burned by its
// first writers, and is a historical gap to fill, or a consumer starting at
// 0 would wait on sequence 1 forever. Further up, the missing prefix is
// history that was pruned: the anchor goes just below the lowest present
// row, since refilling 1..lowest could write millions of placeholders nobody
// reads. An empty table with a head beyond a page is pruned down to nothing;
// it has no anchor yet (ok=false) and the pass waits for the first row.
func initialWatermark(lowest, head int64, pageSize int) (w int64, ok bool) {
	first := lowest
	if first <= 0 {
		first = head + 1
	}
	switch {
	case first-1 <= int64(pageSize):
		return 0, true
	case lowest <= 0:
		return 0, false
	default:
		return lowest - 1, true
	}
}

// advance moves the watermark over the contiguous prefix of page (present
// sequences after w, ascending) and returns the rest: the present sequences
// beyond the first missing one.
func advance(w int64, page []int64) (int64, []int64) {
	i := 0
	for i < len(page) && page[i] == w+1 {
		w++
		i++
	}
	return w, page[i:]
}

// stalled says whether W+1 is allocated but missing: a present row above it
// proves it was handed out, and so does a head above W.
func stalled(w, head int64, rest []int64) bool {
	return len(rest) > 0 || w < head
}

// historical says the stall at w is a gap that was already there when the
// fill first ran: allocated at or below the head read by the first run, so
// a marker taken any time later post-dates its writer. No grace.
func historical(st State, w int64) bool {
	return st.Started && w+1 <= st.HistoricalHead
}

// windowEnd is the last sequence an episode may fill: (from, min(marker
// head, from + page)]. One page read's reach bounds it (not the batch limit:
// a window wider than one insert is what lets several batches share one
// grace); the marker head bounds it because the proof says nothing about
// sequences allocated after the head was read. Before the marker exists the
// page bound alone applies: the marker, once taken, post-dates the stall.
func (ep Episode) windowEnd(pageSize int) int64 {
	end := ep.From + int64(pageSize)
	if ep.Marker != nil && ep.MarkerHead < end {
		end = ep.MarkerHead
	}
	return end
}

// decideEpisode keeps the current episode when the stall at w lies inside
// its window (w < window end): that is the episode's own progress, and it
// keeps its marker and its original grace, so grace is paid once per
// episode, not per batch. A stall at or beyond the window end — in
// particular one allocated after the marker was taken, which its stale
// head can never cover — starts a new episode with a fresh grace and, later,
// a fresh marker; keeping the old one would strand the watermark.
func decideEpisode(cur *Episode, w int64, now time.Time, pageSize int) (ep Episode, fresh bool) {
	if cur != nil && w >= cur.From && w < cur.windowEnd(pageSize) {
		return *cur, false
	}
	// At timestamptz precision, so the episode reads back as it was kept.
	return Episode{From: w, FirstSeenAt: now.Round(0).Truncate(time.Microsecond)}, true
}

// graceStep is what the pass does about an episode's grace.
type graceStep int

const (
	graceOver  graceStep = iota // due: take the marker, prove, fill
	graceWait                   // not due, but due within the budget: wait here, re-reading
	graceLater                  // not due within the budget: end the pass, a later one fills
)

// decideGrace: nothing is written before firstSeen + grace (most stalls are
// a writer committing a moment late, and those must cost no writes). A
// grace that ends inside the budget is waited out in the pass, so one
// invocation usually resolves a stall instead of leaving it a minute to the
// next schedule.
func decideGrace(ep Episode, grace time.Duration, now, deadline time.Time) graceStep {
	due := ep.FirstSeenAt.Add(grace)
	switch {
	case !now.Before(due):
		return graceOver
	case due.Before(deadline):
		return graceWait
	default:
		return graceLater
	}
}

// missingIn lists the sequences of (w, end] absent from present (ascending
// sequences after w, as returned by a page read starting at w).
func missingIn(w, end int64, present []int64) []int64 {
	var out []int64
	i := 0
	for s := w + 1; s <= end; s++ {
		for i < len(present) && present[i] < s {
			i++
		}
		if i < len(present) && present[i] == s {
			continue
		}
		out = append(out, s)
	}
	return out
}

// batches splits seqs into inserts of at most limit sequences: each
// statement stays short, and the pass runs as many as its budget allows.
func batches(seqs []int64, limit int) [][]int64 {
	var out [][]int64
	for len(seqs) > 0 {
		n := min(limit, len(seqs))
		out = append(out, seqs[:n])
		seqs = seqs[n:]
	}
	return out
}

// stallAge is how long the current stall has lasted, 0 without one.
func stallAge(ep *Episode, now time.Time) time.Duration {
	if ep == nil {
		return 0
	}
	return max(now.Sub(ep.FirstSeenAt), 0)
}

package fill

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Unit tests of the pass's decisions with an injected clock; no database.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

func u64(v uint64) *uint64 { return &v }

func TestPassOverPrefixOnlyALongProvenPrefixOfTheOutbox(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		w, first   int64
		top        int64
		historical bool
		page       int
		wantW      int64
	}{
		{"first writers burned 1..2: filled", 0, 3, 5, true, 1000, 0},
		{"a run of exactly a page is filled", 0, 1001, 1200, true, 1000, 0},
		{"a run longer than a page is passed over", 0, 1002, 1200, true, 1000, 1001},
		{"nothing present up to top: all of it", 0, 0, 5000, true, 1000, 5000},
		{"capped at top, the proof's reach", 0, 9000, 5000, true, 1000, 5000},
		{"first present above top: capped", 0, 5001, 5000, true, 1000, 5000},
		{"past the start: nothing to pass over", 1, 5000, 6000, true, 1000, 1},
		{"a live stall is filled, never passed over", 0, 5000, 6000, false, 1000, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if w := passOverPrefix(prefix{W: c.w, First: c.first, Top: c.top, Historical: c.historical, PageSize: c.page}); w != c.wantW {
				t.Errorf("passOverPrefix(%d, %d, %d, %v, %d) = %d, want %d", c.w, c.first, c.top, c.historical, c.page, w, c.wantW)
			}
		})
	}
}

func TestAdvanceStopsBelowTheFirstMissingSequence(t *testing.T) {
	t.Parallel()
	cases := []struct {
		w     int64
		page  []int64
		wantW int64
		rest  []int64
	}{
		{10, nil, 10, nil},
		{10, []int64{11, 12, 13}, 13, nil},
		{10, []int64{11, 13, 14}, 11, []int64{13, 14}},
		{10, []int64{12}, 10, []int64{12}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("%d then %v", c.w, c.page), func(t *testing.T) {
			w, rest := advance(c.w, c.page)
			if w != c.wantW {
				t.Errorf("advance(%d, %v): watermark = %d, want %d", c.w, c.page, w, c.wantW)
			}
			if !slices.Equal(rest, c.rest) {
				t.Errorf("advance(%d, %v): rest = %v, want %v", c.w, c.page, rest, c.rest)
			}
		})
	}
}

func TestDecideCycleStartsOneForANewStall(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	c, fresh := decideCycle(nil, 10, 0, now)
	if !fresh {
		t.Fatal("no cycle yet: want a fresh one")
	}
	if c.From != 10 {
		t.Errorf("From = %d, want the watermark 10", c.From)
	}
	if !c.FirstSeenAt.Equal(now) {
		t.Errorf("FirstSeenAt = %v, want now %v", c.FirstSeenAt, now)
	}
	if c.Historical {
		t.Error("a stall above the historical head 0 is not historical")
	}
}

func TestDecideCycleKeepsAMarkedCycleUpToItsHead(t *testing.T) {
	t.Parallel()
	cur := &Cycle{From: 10, FirstSeenAt: t0, Marker: u64(99), MarkerHead: 20}
	c, fresh := decideCycle(cur, 15, 0, t0.Add(time.Minute))
	if fresh {
		t.Fatal("stall at 15 below the marker head 20: want the same cycle")
	}
	if c.Marker == nil || *c.Marker != 99 {
		t.Errorf("Marker = %s, want the cycle's 99 kept", show(c.Marker))
	}
	if !c.FirstSeenAt.Equal(t0) {
		t.Errorf("FirstSeenAt = %v, want the cycle's %v (grace paid once)", c.FirstSeenAt, t0)
	}
}

func TestDecideCycleEndsAMarkedCycleAtItsHead(t *testing.T) {
	t.Parallel()
	cur := &Cycle{From: 10, FirstSeenAt: t0, Marker: u64(99), MarkerHead: 20}
	c, fresh := decideCycle(cur, 20, 0, t0.Add(time.Minute))
	if !fresh {
		t.Fatal("stall at the marker head 20 (allocated after the marker): want the next cycle")
	}
	if c.Marker != nil {
		t.Errorf("the next cycle has marker %d, want none yet", *c.Marker)
	}
}

func TestDecideCycleRestartsTheGraceWhenTheStallMoved(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	cur := &Cycle{From: 10, FirstSeenAt: t0}
	if _, fresh := decideCycle(cur, 10, 0, now); fresh {
		t.Error("unmarked cycle, same stall: want the same cycle")
	}
	c, fresh := decideCycle(cur, 11, 0, now)
	if !fresh {
		t.Fatal("unmarked cycle, the stall moved on: want a new cycle")
	}
	if !c.FirstSeenAt.Equal(now) {
		t.Errorf("FirstSeenAt = %v, want now (a grace of its own)", c.FirstSeenAt)
	}
}

func TestDecideCycleMarksStallsAtOrBelowTheFirstHeadHistorical(t *testing.T) {
	t.Parallel()
	if c, _ := decideCycle(nil, 49, 50, t0); !c.Historical {
		t.Error("W+1 = 50 <= historical head 50: want historical")
	}
	if c, _ := decideCycle(nil, 50, 50, t0); c.Historical {
		t.Error("W+1 = 51 > historical head 50: want not historical")
	}
}

func TestHeadLogDatesAStallFromWhenItsSequenceWasSeenAllocated(t *testing.T) {
	t.Parallel()
	var l headLog
	keep := 2 * time.Second
	l.add(t0, 10, keep)
	l.add(t0.Add(time.Second), 20, keep)
	l.add(t0.Add(2*time.Second), 20, keep) // no new head: nothing to date
	l.add(t0.Add(3*time.Second), 30, keep)
	now := t0.Add(3 * time.Second)
	if got := l.since(15, now); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("since(15) = %v, want when the head first reached 20 (t0+1s)", got)
	}
	if got := l.since(25, now); !got.Equal(t0.Add(3 * time.Second)) {
		t.Errorf("since(25) = %v, want t0+3s", got)
	}
	if got := l.since(31, now); !got.Equal(now) {
		t.Errorf("since(31) = %v, want now (never seen allocated)", got)
	}
}

func TestHeadLogForgetsButStillDatesOldSequences(t *testing.T) {
	t.Parallel()
	var l headLog
	keep := time.Second
	l.add(t0, 10, keep)
	l.add(t0.Add(5*time.Second), 20, keep)
	l.add(t0.Add(10*time.Second), 30, keep)
	if n := len(l.head); n != 2 {
		t.Errorf("kept %d entries, want the one before the window and the newest", n)
	}
	if got := l.since(15, t0.Add(10*time.Second)); !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("since(15) = %v, want the oldest kept entry, t0+5s", got)
	}
}

func TestGraceDueAfterTheFirstSightingExceptForHistoricalGaps(t *testing.T) {
	t.Parallel()
	c := Cycle{From: 1, FirstSeenAt: t0}
	if got := graceDue(c, 2*time.Second); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("grace 2s: due %v, want first seen + 2s", got)
	}
	if got := graceDue(c, pass.Off); !got.Equal(t0) {
		t.Errorf("no grace: due %v, want first seen", got)
	}
	c.Historical = true
	if got := graceDue(c, time.Hour); !got.Equal(t0) {
		t.Errorf("historical: due %v, want first seen (no grace)", got)
	}
}

func TestMarkerHeadIsTheHeadJustReadCappedForHistoricalCycles(t *testing.T) {
	t.Parallel()
	if got := markerHead(Cycle{}, 50, 80); got != 80 {
		t.Errorf("live cycle: %d, want the head just read, 80", got)
	}
	if got := markerHead(Cycle{Historical: true}, 50, 80); got != 50 {
		t.Errorf("historical cycle: %d, want the first run's head, 50", got)
	}
	if got := markerHead(Cycle{Historical: true}, 90, 80); got != 80 {
		t.Errorf("historical head above the current head: %d, want the current head, 80", got)
	}
}

// walk runs a gapCursor over a table holding present, with the given
// page size and batch limit, and returns the batches it yields.
func walk(from, top int64, present []int64, pageSize, limit int) (batches [][]int64, pages int) {
	g := newGapCursor(from, top)
	for !g.done() {
		if g.needPage() {
			pages++
			var page []int64
			for _, s := range present {
				if s > g.pos && len(page) < pageSize {
					page = append(page, s)
				}
			}
			g.feed(page, pageSize)
		}
		if b := g.next(limit); len(b) > 0 {
			batches = append(batches, b)
		}
	}
	return batches, pages
}

func TestGapCursorYieldsEveryMissingSequenceOnce(t *testing.T) {
	t.Parallel()
	present := []int64{12, 14, 15, 20}
	batches, _ := walk(10, 22, present, 2, 100)
	got := slices.Concat(batches...)
	want := []int64{11, 13, 16, 17, 18, 19, 21, 22}
	if !slices.Equal(got, want) {
		t.Errorf("missing = %v, want %v", got, want)
	}
}

func TestGapCursorStopsAtTop(t *testing.T) {
	t.Parallel()
	batches, _ := walk(10, 13, []int64{20}, 10, 100)
	if got := slices.Concat(batches...); !slices.Equal(got, []int64{11, 12, 13}) {
		t.Errorf("missing = %v, want 11..13 and nothing above the top", got)
	}
}

func TestGapCursorCutsBatchesAtTheLimit(t *testing.T) {
	t.Parallel()
	batches, _ := walk(0, 10, nil, 10, 4)
	if len(batches) != 3 {
		t.Fatalf("batches = %v, want 3 of at most 4", batches)
	}
	if !slices.Equal(batches[2], []int64{9, 10}) {
		t.Errorf("last batch = %v, want [9 10]", batches[2])
	}
}

func TestGapCursorReadsAPageOncePerPageOfPresentRows(t *testing.T) {
	t.Parallel()
	// A 100,000 gap then two present rows: one page read serves all 100
	// batches cut from the gap.
	_, pages := walk(0, 100_002, []int64{100_001, 100_002}, 1000, 1000)
	if pages != 1 {
		t.Errorf("page reads = %d, want 1", pages)
	}
}

func TestStallAgeCountsFromTheFirstSighting(t *testing.T) {
	t.Parallel()
	if got := stallAge(nil, t0); got != 0 {
		t.Errorf("no cycle: stallAge = %v, want 0", got)
	}
	if got := stallAge(&Cycle{FirstSeenAt: t0}, t0.Add(3*time.Second)); got != 3*time.Second {
		t.Errorf("first seen 3s ago: stallAge = %v, want 3s", got)
	}
}

func TestGapCursorSkipToPassesOverWithoutYielding(t *testing.T) {
	t.Parallel()
	g := newGapCursor(0, 20)
	g.feed([]int64{12, 14}, 1000)
	g.skipTo(11)
	if got, want := g.next(100), []int64{13, 15, 16, 17, 18, 19, 20}; !slices.Equal(got, want) {
		t.Errorf("next after skipTo(11) = %v, want %v: nothing at or below 11", got, want)
	}
	g = newGapCursor(0, 5)
	g.skipTo(9)
	if !g.done() {
		t.Errorf("skipTo past top: pos %d, want done at top 5", g.pos)
	}
}

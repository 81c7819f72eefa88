package fill

import (
	"slices"
	"testing"
	"time"
)

// Unit tests of the pass's decisions with an injected clock; no database.

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)

func u64(v uint64) *uint64 { return &v }

func TestInitialWatermark(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name         string
		lowest, head int64
		page         int
		wantW        int64
		wantAnchored bool
	}{
		{"fresh outbox", 0, 0, 1000, 0, true},
		{"first writers burned 1..2", 3, 5, 1000, 0, true},
		{"young outbox, all burned so far", 0, 7, 1000, 0, true},
		{"lowest at the page edge is still young", 1001, 1200, 1000, 0, true},
		{"pruned history is never refilled", 1002, 1200, 1000, 1001, true},
		{"pruned to nothing waits for a row", 0, 5000, 1000, 0, false},
	}
	for _, c := range cases {
		w, ok := initialWatermark(c.lowest, c.head, c.page)
		if w != c.wantW || ok != c.wantAnchored {
			t.Errorf("%s: got %d %v, want %d %v", c.name, w, ok, c.wantW, c.wantAnchored)
		}
	}
}

func TestAdvance(t *testing.T) {
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
		w, rest := advance(c.w, c.page)
		if w != c.wantW || !slices.Equal(rest, c.rest) {
			t.Errorf("advance(%d, %v) = %d %v, want %d %v", c.w, c.page, w, rest, c.wantW, c.rest)
		}
	}
}

func TestStalled(t *testing.T) {
	t.Parallel()
	if stalled(10, 10, nil) {
		t.Error("caught up is not a stall")
	}
	if !stalled(10, 12, nil) {
		t.Error("a burned tail (head above the last present row) is a stall")
	}
	if !stalled(10, 10, []int64{12}) {
		t.Error("a present row above W+1 proves W+1 allocated")
	}
}

func TestHistorical(t *testing.T) {
	t.Parallel()
	st := State{Started: true, HistoricalHead: 50}
	if !historical(st, 49) {
		t.Error("W+1 = 50 <= historical head is historical")
	}
	if historical(st, 50) {
		t.Error("W+1 = 51 > historical head is not historical")
	}
}

func TestWindowEnd(t *testing.T) {
	t.Parallel()
	ep := Episode{From: 100}
	if got := ep.windowEnd(1000); got != 1100 {
		t.Errorf("no marker: window end %d, want from+page 1100", got)
	}
	ep.Marker, ep.MarkerHead = u64(7), 150
	if got := ep.windowEnd(1000); got != 150 {
		t.Errorf("marker head 150: window end %d, want 150 (never past the head the proof covers)", got)
	}
	ep.MarkerHead = 5000
	if got := ep.windowEnd(1000); got != 1100 {
		t.Errorf("marker head 5000: window end %d, want 1100", got)
	}
}

func TestDecideEpisode(t *testing.T) {
	t.Parallel()
	now := t0.Add(time.Minute)
	if ep, fresh := decideEpisode(nil, 10, now, 1000); !fresh || ep.From != 10 || !ep.FirstSeenAt.Equal(now) {
		t.Fatalf("no episode: got %+v fresh=%v", ep, fresh)
	}
	cur := &Episode{From: 10, FirstSeenAt: t0, Marker: u64(99), MarkerHead: 20}
	// Inside the window: the episode's own progress keeps grace and marker.
	ep, fresh := decideEpisode(cur, 15, now, 1000)
	if fresh || ep.From != 10 || !ep.FirstSeenAt.Equal(t0) || ep.Marker == nil || *ep.Marker != 99 {
		t.Fatalf("stall inside window: got %+v fresh=%v, want the same episode", ep, fresh)
	}
	// At the window end (the marker head): a sequence allocated after the
	// marker; a fresh episode with no marker.
	ep, fresh = decideEpisode(cur, 20, now, 1000)
	if !fresh || ep.From != 20 || ep.Marker != nil || !ep.FirstSeenAt.Equal(now) {
		t.Fatalf("stall at window end: got %+v fresh=%v, want a new episode", ep, fresh)
	}
	// No marker yet: the page bound alone.
	grace := &Episode{From: 10, FirstSeenAt: t0}
	if _, fresh := decideEpisode(grace, 14, now, 5); fresh {
		t.Error("no marker, stall at 14 < 10+5: keep")
	}
	if _, fresh := decideEpisode(grace, 15, now, 5); !fresh {
		t.Error("no marker, stall at 15 = 10+5: new episode")
	}
}

func TestDecideGrace(t *testing.T) {
	t.Parallel()
	ep := Episode{From: 1, FirstSeenAt: t0}
	grace := 2 * time.Second
	if got := decideGrace(ep, grace, t0.Add(2*time.Second), t0.Add(3*time.Second)); got != graceOver {
		t.Errorf("at due: %v, want over", got)
	}
	if got := decideGrace(ep, grace, t0.Add(time.Second), t0.Add(10*time.Second)); got != graceWait {
		t.Errorf("due inside budget: %v, want wait", got)
	}
	if got := decideGrace(ep, grace, t0.Add(time.Second), t0.Add(1500*time.Millisecond)); got != graceLater {
		t.Errorf("due after deadline: %v, want later", got)
	}
	if got := decideGrace(ep, 0, t0, t0); got != graceOver {
		t.Errorf("zero grace: %v, want over", got)
	}
}

func TestMissingIn(t *testing.T) {
	t.Parallel()
	if got := missingIn(10, 15, []int64{12, 14, 20}); !slices.Equal(got, []int64{11, 13, 15}) {
		t.Errorf("got %v", got)
	}
	if got := missingIn(10, 10, nil); len(got) != 0 {
		t.Errorf("empty window: got %v", got)
	}
	if got := missingIn(10, 13, nil); !slices.Equal(got, []int64{11, 12, 13}) {
		t.Errorf("burned tail: got %v", got)
	}
}

func TestBatches(t *testing.T) {
	t.Parallel()
	got := batches([]int64{1, 2, 3, 4, 5}, 2)
	if len(got) != 3 || !slices.Equal(got[0], []int64{1, 2}) || !slices.Equal(got[2], []int64{5}) {
		t.Errorf("got %v", got)
	}
	if len(batches(nil, 2)) != 0 {
		t.Error("no sequences, no batches")
	}
}

func TestStallAge(t *testing.T) {
	t.Parallel()
	if stallAge(nil, t0) != 0 {
		t.Error("no episode: 0")
	}
	if got := stallAge(&Episode{FirstSeenAt: t0}, t0.Add(3*time.Second)); got != 3*time.Second {
		t.Errorf("got %v", got)
	}
}

package local

import (
	"testing"
	"time"
)

func TestFillBoundIsGracePlusTickWithNothingOpen(t *testing.T) {
	at := time.Unix(1000, 0)
	if got, want := FillBound(at, 2*time.Second, 500*time.Millisecond, nil), at.Add(2500*time.Millisecond); !got.Equal(want) {
		t.Errorf("bound %v, want rollback + 2.5s %v", got, want)
	}
}

func TestFillBoundWaitsForAnOlderOpenTransaction(t *testing.T) {
	at := time.Unix(1000, 0)
	held := []Interval{{Begin: at.Add(-time.Second), End: at.Add(6 * time.Second)}}
	if got, want := FillBound(at, 2*time.Second, 500*time.Millisecond, held), at.Add(6500*time.Millisecond); !got.Equal(want) {
		t.Errorf("bound %v, want the transaction's end + a tick %v", got, want)
	}
}

func TestFillBoundIgnoresWhatBeganAfterTheMarkerWasDue(t *testing.T) {
	at := time.Unix(1000, 0)
	later := []Interval{{Begin: at.Add(5 * time.Second), End: at.Add(10 * time.Second)}}
	if got, want := FillBound(at, 2*time.Second, 500*time.Millisecond, later), at.Add(2500*time.Millisecond); !got.Equal(want) {
		t.Errorf("bound %v, want %v: a transaction newer than the marker holds nothing", got, want)
	}
}

func TestFillBoundChainsBlockers(t *testing.T) {
	at := time.Unix(1000, 0)
	chain := []Interval{
		{Begin: at.Add(4 * time.Second), End: at.Add(9 * time.Second)}, // begins before the first one ends
		{Begin: at.Add(-time.Second), End: at.Add(5 * time.Second)},
	}
	if got, want := FillBound(at, 2*time.Second, 500*time.Millisecond, chain), at.Add(9500*time.Millisecond); !got.Equal(want) {
		t.Errorf("bound %v, want the second blocker's end + a tick %v", got, want)
	}
}

func TestFillBoundAfterABlindMomentIsAWholeGraceLater(t *testing.T) {
	at := time.Unix(1000, 0)
	blind := []Interval{{Begin: at.Add(-time.Second), End: at.Add(5 * time.Second), Blind: true}}
	if got, want := FillBound(at, 2*time.Second, 500*time.Millisecond, blind), at.Add(7500*time.Millisecond); !got.Equal(want) {
		t.Errorf("bound %v, want the blind moment's end + grace + tick %v: the next pass first sees the gap then", got, want)
	}
}

func TestFillBoundChainsAHolderAfterABlindMoment(t *testing.T) {
	at := time.Unix(1000, 0)
	chain := []Interval{
		{Begin: at.Add(-time.Second), End: at.Add(5 * time.Second), Blind: true},
		{Begin: at.Add(6 * time.Second), End: at.Add(15 * time.Second)}, // opened before the new marker
	}
	if got, want := FillBound(at, 2*time.Second, 500*time.Millisecond, chain), at.Add(15500*time.Millisecond); !got.Equal(want) {
		t.Errorf("bound %v, want the holder's end + a tick %v", got, want)
	}
}

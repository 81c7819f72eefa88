package fill

import "time"

// The decisions of a pass, as pure functions of what it read and the time:
// unit tested without a database (decide_test.go). The pass in pass.go
// only reads, calls these, and writes.

// prefix is what passOverPrefix decides on: the watermark W, the lowest
// present sequence First (0 for none up to Top), Top (the cycle's marker
// head and the head read this pass), whether the cycle is Historical, and
// the page size.
type prefix struct {
	W, First, Top int64
	Historical    bool
	PageSize      int
}

// passOverPrefix is how far a proven historical cycle over the start of
// the outbox (watermark 0, so nothing was ever passed) moves the watermark
// without writing: up to just below the first present row, capped at Top,
// when that run is longer than a page. First is read after the proof
// passed: every sequence of the run is missing now and, proven, can never
// be written (§3.3), whatever made it missing (writers that rolled back, a
// prefix deleted by an earlier retention, a sequence started high), so
// passing it over is as sound as filling it; refilling a long one would
// write placeholders nobody reads. A shorter run (a young outbox whose
// first writers rolled back) is filled as any gap is. Anything else
// returns W.
func passOverPrefix(p prefix) int64 {
	if p.W != 0 || !p.Historical {
		return p.W
	}
	end := p.Top
	if p.First > 0 {
		end = min(end, p.First-1)
	}
	if end <= int64(p.PageSize) {
		return p.W
	}
	return end
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

// decideCycle keeps the current cycle or starts a new one for the stall at
// w (w+1 is allocated but missing).
//
//   - A cycle with a marker owns (From, MarkerHead]: every sequence in it
//     is covered by the one proof, so the cycle lasts until the watermark
//     reaches its marker head, across pages, batches and passes. That is
//     what makes grace and proof a cost per cycle, not per page.
//   - A cycle still in its grace is about one stall: if the watermark moved
//     past it (the late writer committed, the common case), the stall it
//     stopped at now is a new one, with a grace of its own.
//   - A stall at or below the head the first run saw is historical: its
//     writer was there before the fill, so there is nothing to wait out.
//
// A new cycle's stall is dated since (see headLog), at timestamptz
// precision so that it reads back as it was kept.
func decideCycle(cur *Cycle, w, historicalHead int64, since time.Time) (c Cycle, fresh bool) {
	if cur != nil {
		if cur.Marker != nil && w < cur.MarkerHead {
			return *cur, false
		}
		if cur.Marker == nil && w == cur.From {
			return *cur, false
		}
	}
	return Cycle{
		From:        w,
		FirstSeenAt: since.Round(0).Truncate(time.Microsecond),
		Historical:  w+1 <= historicalHead,
	}, true
}

// headLog remembers, for the last little while, when the pass saw the
// allocation head reach each value. A sequence that is missing now has been
// missing since it was allocated, so a stall at s has lasted at least since
// the head was first seen at or above s. That matters after a cycle whose
// proof was held back: the stalls it hid have lasted all that time, and
// waiting a fresh grace for them would only add latency.
type headLog struct {
	at   []time.Time
	head []int64
}

// add records a head read at now, and forgets what is older than keep but
// the last such entry, which still dates anything at or below its head.
func (l *headLog) add(now time.Time, head int64, keep time.Duration) {
	if n := len(l.head); n == 0 || head > l.head[n-1] {
		l.at, l.head = append(l.at, now), append(l.head, head)
	}
	cut := 0
	for cut+1 < len(l.at) && now.Sub(l.at[cut+1]) > keep {
		cut++
	}
	l.at, l.head = l.at[cut:], l.head[cut:]
}

// since is the earliest time the log saw the head at or above seq, now if
// it never did.
func (l *headLog) since(seq int64, now time.Time) time.Time {
	for i, h := range l.head {
		if h >= seq {
			return l.at[i]
		}
	}
	return now
}

// graceDue is when the cycle may take its marker: nothing is written before
// its stall has lasted the grace (most stalls are a writer committing a
// moment late, and those must cost no writes). A historical cycle is due
// at once.
func graceDue(c Cycle, grace time.Duration) time.Time {
	if c.Historical || grace <= 0 {
		return c.FirstSeenAt
	}
	return c.FirstSeenAt.Add(grace)
}

// markerHead is the head a new marker pairs with: the first run's head for
// a historical cycle (read in an earlier statement, so strictly before the
// marker, §3.2), the head read just now otherwise. Never above the current
// head: a state restored from elsewhere must not make the fill write above
// the allocation head (§3.5).
func markerHead(c Cycle, historicalHead, head int64) int64 {
	if c.Historical {
		return min(historicalHead, head)
	}
	return head
}

// gapCursor walks the missing sequences of (pos, top] from pages of present
// rows, in index order, a batch at a time: a gap of any size costs memory
// for one batch, and a page read serves every batch cut from it.
type gapCursor struct {
	// pos: every sequence at or below it has been looked at.
	pos int64
	top int64
	// page holds the present rows after pos from the last page read;
	// pageEnd is how far that read speaks for: its last row when the page
	// was full (more rows may follow), top when it was not.
	page    []int64
	pageEnd int64
}

func newGapCursor(from, top int64) *gapCursor {
	return &gapCursor{pos: from, top: top, pageEnd: from}
}

// skipTo moves pos to to without yielding what lies before it: the
// proven prefix passOverPrefix passes over.
func (g *gapCursor) skipTo(to int64) {
	if to > g.pos {
		g.pos = min(to, g.top)
	}
}

// done says every sequence up to top has been looked at.
func (g *gapCursor) done() bool { return g.pos >= g.top }

// needPage says the next missing sequences lie beyond the last page read.
func (g *gapCursor) needPage() bool { return !g.done() && g.pos >= g.pageEnd }

// feed takes a page read (present rows after pos, at most pageSize).
func (g *gapCursor) feed(rows []int64, pageSize int) {
	g.page = rows
	g.pageEnd = g.top
	if n := len(rows); n == pageSize && rows[n-1] < g.top {
		g.pageEnd = rows[n-1]
	}
}

// next returns up to limit missing sequences after pos, ascending, and
// moves pos past them and past the present rows in between. It stops at
// the end of what the last page speaks for.
func (g *gapCursor) next(limit int) []int64 {
	var out []int64
	for g.pos < g.pageEnd && len(out) < limit {
		s := g.pos + 1
		for len(g.page) > 0 && g.page[0] < s {
			g.page = g.page[1:]
		}
		if len(g.page) > 0 && g.page[0] == s {
			g.pos = s
			continue
		}
		// A run of missing sequences up to the next present row.
		runEnd := g.pageEnd
		if len(g.page) > 0 {
			runEnd = min(runEnd, g.page[0]-1)
		}
		n := min(runEnd-s+1, int64(limit-len(out)))
		for i := range n {
			out = append(out, s+i)
		}
		g.pos = s + n - 1
	}
	return out
}

// stallAge is how long the current stall has lasted, 0 without one.
func stallAge(c *Cycle, now time.Time) time.Duration {
	if c == nil {
		return 0
	}
	return max(now.Sub(c.FirstSeenAt), 0)
}

// cyclePageSize is how many present rows a fill cycle's page read asks
// for: ten FILL_PAGE_SIZE pages in one statement, at most 100,000 rows.
// The cycle reads its whole proven range, so each statement saved is a
// round trip saved (and, through a pooler, a hop and its check); a tick's
// page read and the prefix passed over keep FILL_PAGE_SIZE itself.
func cyclePageSize(pageSize int) int { return min(10*pageSize, 100_000) }

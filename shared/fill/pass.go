package fill

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// outcome is where a step left the pass.
type outcome int

const (
	caughtUp  outcome = iota // nothing missing up to the head
	inGrace                  // a stall is inside its grace
	inProof                  // the cycle's proof does not pass yet
	progress                 // work was done; look again at once
	outOfTime                // work remains, the budget is spent
	leaseGone                // another pass owns the lease now
)

// invocation is one pass's working state.
type invocation struct {
	s    *Service
	run  *pass.Run
	hold *pass.Holding
	res  *Result

	st State
	// saved is the watermark as last written: a checkpoint with nothing
	// to save (not dirty, the watermark where it was) renews the lease
	// alone, one row, which is every renewal of an idle watching pass.
	saved int64
	head  int64
	// dirty: the cycle or the proof changed, which a checkpoint writes at
	// once (a hand-over or a crash must not lose a stall's first sighting
	// or a blocked proof). A watermark that only moved on waits for the
	// next lease renewal: one statement per tick fewer while writers are
	// busy, and the finish writes it anyway.
	dirty    bool
	graceDue time.Time // when the grace of the stall in hand ends
	blocked  *uint64   // the marker whose proof was last seen blocked
	heads    headLog   // when the head was seen reaching which sequence
}

// RunOnce runs one pass; the input says nothing the pass needs. Waiting
// (grace, proof, lease, budget) is a normal outcome, and so is a statement
// that ran out of the budget (it is named in TimedOut); an error means the
// database failed for the rest of the budget, or ctx ended. The persisted
// state is always one a later pass continues from.
func (s *Service) RunOnce(ctx context.Context, _ json.RawMessage) (*Result, error) {
	run := s.kit.Begin(ctx)
	p := &invocation{s: s, run: run, hold: s.lease.Hold(run), res: &Result{BlockedBy: []Blocker{}}}
	// Transient database errors (a dropped connection, a restart, a
	// failover) are retried every tick while the budget lasts: the
	// persisted state is the checkpoint, and the pool dials afresh.
	err := run.Retry(ctx, pass.RetryPolicy{Every: s.cfg.Tick, Attempts: pass.Unlimited, OnRetry: func(err error) {
		s.kit.Warn(ctx, "retrying after a transient database error", slog.String("error", err.Error()))
	}}, p.attempt)
	return p.res, p.close(ctx, err)
}

// attempt takes the lease and works while it holds it.
func (p *invocation) attempt(ctx context.Context) error {
	watch := !p.s.cfg.Bounded
	err := p.hold.Keep(ctx, watch, p.acquire, p.work)
	if p.hold.Waiting {
		p.res.wait(WaitingLease)
	}
	return err
}

// acquire takes the lease, or (a watching pass) waits to be handed it
// while its budget lasts. Either way it loads the state.
func (p *invocation) acquire(ctx context.Context) error {
	err := p.hold.Acquire(ctx, pass.AcquireParams{Watch: !p.s.cfg.Bounded, Ride: p.s.state.load, Read: loadInto(&p.st)})
	p.res.LeaseWaitMS = p.hold.WaitMS
	switch {
	case p.hold.Held:
		p.dirty, p.saved, p.res.Waiting = false, p.st.Watermark, nil
	case p.hold.Waiting:
		p.res.wait(WaitingLease)
	}
	return err
}

// work runs steps until the budget ends, a successor takes over, or (a
// bounded pass) there is nothing left to do now.
func (p *invocation) work(ctx context.Context) error {
	return p.hold.Watch(ctx, pass.Watching{Step: p.watchStep, Renew: p.checkpoint, HandOver: p.handOver})
}

// watchStep is one step and what follows it, with what the pass waits for
// meanwhile; the state is saved after any step that changed it.
func (p *invocation) watchStep(ctx context.Context) (pass.Next, error) {
	out, err := p.step(ctx)
	switch {
	case err != nil:
		return pass.Next{}, err
	case out == leaseGone:
		return pass.Next{}, pass.ErrLeaseLost
	case out == caughtUp && p.s.cfg.Bounded:
		p.res.Waiting = nil
		return pass.Next{Done: true}, nil // the finish writes the state
	}
	wait, waiting := p.next(out)
	p.res.Waiting = nil
	if waiting != "" {
		p.res.wait(waiting)
	}
	return pass.Next{Wait: wait, Save: p.dirty}, nil
}

// next is what the pass does after a step: how long to wait before the
// next one (0: at once; negative: end the pass), and what it is waiting
// for meanwhile.
func (p *invocation) next(out outcome) (time.Duration, string) {
	tick := p.s.cfg.Tick
	switch out {
	case progress:
		if !p.run.TimeLeft() {
			return -1, WaitingBudget
		}
		return 0, ""
	case outOfTime:
		return -1, WaitingBudget
	case inGrace:
		if p.s.cfg.Bounded && !p.graceDue.Before(p.run.End) {
			// Not due within the budget: a later pass fills it.
			return -1, WaitingGrace
		}
		// Waited out in short steps, re-reading each time: a late commit
		// ends the stall early, at no write.
		return min(tick, max(p.graceDue.Sub(p.s.kit.Now()), time.Millisecond)), WaitingGrace
	case inProof:
		return tick, WaitingProof
	}
	return tick, "" // caught up, watching
}

// step is one look: the head, the watermark over whatever is present, and
// the cycle of the stall it stops at.
func (p *invocation) step(ctx context.Context) (outcome, error) {
	if o, held, err := p.readHead(ctx); err != nil || !held {
		return o, err
	}
	if more, err := p.advance(ctx); err != nil || more {
		return outOfTime, err
	}
	w := p.st.Watermark
	if w >= p.head {
		p.setCycle(nil)
		return caughtUp, nil
	}

	// w+1 is allocated (at or below the head) and missing: a stall.
	now := p.s.kit.Now()
	if c, fresh := decideCycle(p.st.Cycle, w, p.st.HistoricalHead, p.heads.since(w+1, now)); fresh {
		p.setCycle(&c)
	}
	c := p.st.Cycle
	if p.graceDue = graceDue(*c, p.s.cfg.Grace); now.Before(p.graceDue) {
		return inGrace, nil
	}
	if c.Marker == nil {
		if err := p.takeMarker(ctx); err != nil {
			return 0, err
		}
	}
	if o, proven, err := p.prove(ctx, c, now); err != nil || !proven {
		return o, err
	}
	began := p.s.kit.Now()
	done, err := p.fillCycle(ctx)
	p.res.FillMS += p.s.kit.Now().Sub(began).Milliseconds()
	if err != nil || !done {
		return outOfTime, err
	}
	p.res.Cycles++
	p.setCycle(nil)
	return progress, nil
}

// readHead polls the lease and the head (one statement), records the head
// for dating stalls, and starts a table the fill has never started on.
// held is false when the step ends here: the lease went to a successor.
func (p *invocation) readHead(ctx context.Context) (o outcome, held bool, err error) {
	p.res.Ticks++
	var head int64
	if held, err := p.hold.Poll(ctx, &head); err != nil || !held {
		return leaseGone, false, err
	}
	p.head, p.res.headRead = head, true
	p.heads.add(p.s.kit.Now(), p.head, max(p.s.cfg.Grace, 0)+p.s.cfg.Tick)
	if !p.st.Started {
		// The anchor is 0, which passes nothing: whatever is missing below
		// the lowest present row may belong to a writer still running, so
		// it is a historical cycle like any gap the first run sees, and
		// only its proof may move the watermark over it (passOverPrefix).
		// The historical boundary is the head polled above: strictly
		// before any marker, which a later statement assigns.
		p.st.Started, p.st.Watermark, p.st.HistoricalHead = true, 0, p.head
		p.dirty = true
	}
	return 0, true, nil
}

// prove checks cycle c's marker (docs/design.md §3): proven says every
// sequence up to its marker head is abandoned and the cycle may fill;
// otherwise o says why not. A marker from another cluster is dropped, to
// be retaken at the next step; a blocked proof dates its blockage once.
func (p *invocation) prove(ctx context.Context, c *Cycle, now time.Time) (o outcome, proven bool, err error) {
	proof, err := p.s.proof.checkProof(ctx, p.run.Q, *c.Marker)
	if err != nil {
		return 0, false, err
	}
	switch proof {
	case proofForeign:
		p.s.kit.Warn(ctx, "the persisted marker is not this cluster's (restored state, logical replication or a blue/green switch-over): discarding it and taking a fresh one",
			slog.Uint64("marker", *c.Marker), slog.Int64("marker_head", c.MarkerHead))
		p.res.ForeignMarkers++
		c.Marker, c.MarkerHead = nil, 0
		p.st.ProofBlockedSince, p.dirty = nil, true
		return progress, false, nil
	case proofBlocked:
		p.blocked = c.Marker
		if p.st.ProofBlockedSince == nil {
			p.st.ProofBlockedSince, p.dirty = &now, true
		}
		return inProof, false, nil
	}
	p.blocked = nil
	if p.st.ProofBlockedSince != nil {
		p.st.ProofBlockedSince, p.dirty = nil, true
	}
	return 0, true, nil
}

// advance moves the watermark over contiguous present rows, a page at a
// time, up to the first missing sequence or the head. more is true when
// the budget ended first.
func (p *invocation) advance(ctx context.Context) (more bool, err error) {
	for p.st.Watermark < p.head {
		page, err := p.s.events.PresentAfter(ctx, p.run.Q, p.st.Watermark, p.s.cfg.PageSize)
		if err != nil {
			return false, err
		}
		w, rest := advance(p.st.Watermark, page)
		p.setWatermark(w)
		if len(rest) > 0 || len(page) < p.s.cfg.PageSize {
			return false, nil
		}
		if !p.run.TimeLeft() {
			return true, nil
		}
		// A long backlog keeps the lease (and acknowledges a hand-over)
		// page after page.
		if p.renewDue() {
			if err := p.checkpoint(ctx); err != nil {
				return false, err
			}
		}
	}
	return false, nil
}

// takeMarker pairs a head read with a marker assigned in a later statement
// (§3.2): every sequence at or below that head was allocated by a writer
// that already had its xid (§3.1), so its xid is older than the marker.
func (p *invocation) takeMarker(ctx context.Context) error {
	c := p.st.Cycle
	h := markerHead(*c, p.st.HistoricalHead, p.head)
	if !c.Historical {
		var err error
		if h, err = p.s.events.Head(ctx, p.run.Q); err != nil {
			return err
		}
		p.head = max(p.head, h)
	}
	if hook := p.s.afterHeadRead; hook != nil {
		hook(h)
	}
	var m uint64
	if err := p.hold.Renew(ctx, p.s.state.marker, markerArgs(*c, h), scanned(&m)); err != nil {
		return pass.WrapUnlessLost("take abandonment marker", err)
	}
	c.Marker, c.MarkerHead = &m, h
	p.st.ProofBlockedSince = nil
	p.res.MarkersTaken++
	return nil
}

// fillCycle writes a placeholder for every missing sequence of (W, marker
// head], proven abandoned by the cycle's marker: it pages through the
// present rows in index order and inserts at most BatchLimit per
// statement, as many statements as the budget allows. It returns false
// when the budget ended first; the watermark (persisted at the next
// checkpoint) is where the next pass resumes, with the same marker.
// Never above the head read this pass (§3.5), and every insert is ON
// CONFLICT DO NOTHING.
func (p *invocation) fillCycle(ctx context.Context) (bool, error) {
	c := p.st.Cycle
	g := newGapCursor(p.st.Watermark, min(c.MarkerHead, p.head))
	limit := p.s.cfg.BatchLimit
	pageSize := cyclePageSize(p.s.cfg.PageSize)
	pending := make([]int64, 0, limit)
	for {
		if g.needPage() {
			if !p.run.TimeLeft() {
				return false, nil
			}
			page, err := p.s.events.PresentAfter(ctx, p.run.Q, g.pos, pageSize)
			if err != nil {
				return false, err
			}
			g.feed(page, pageSize)
			// Read after the proof passed, so every sequence below the
			// first present row is missing for good (§3.3).
			first := int64(0)
			if len(page) > 0 {
				first = page[0]
			}
			if to := passOverPrefix(prefix{W: g.pos, First: first, Top: g.top, Historical: c.Historical, PageSize: p.s.cfg.PageSize}); to > g.pos {
				g.skipTo(to)
				p.setWatermark(g.pos)
				p.res.PassedOver += g.pos
				p.dirty = true
			}
		}
		pending = append(pending, g.next(limit-len(pending))...)
		switch {
		case len(pending) == limit || g.done() && len(pending) > 0:
			if !p.run.TimeLeft() {
				return false, nil
			}
			if hook := p.s.beforeInsert; hook != nil {
				hook(pending)
			}
			wrote, err := p.s.events.InsertMissing(ctx, p.run.Q, pending, store.FilledByFill)
			if err != nil {
				return false, err
			}
			p.recordFilled(wrote)
			pending = pending[:0]
			p.setWatermark(g.pos)
			// A long cycle keeps its lease (and shows its progress) with a
			// checkpoint when the lease is due, not one per insert.
			if p.renewDue() {
				if err := p.checkpoint(ctx); err != nil {
					return false, err
				}
			}
		case len(pending) == 0:
			p.setWatermark(g.pos)
		}
		if g.done() {
			return true, nil
		}
	}
}

func (p *invocation) recordFilled(wrote store.Written) {
	if wrote.N == 0 {
		return
	}
	lo, hi := wrote.Min, wrote.Max
	r := p.res
	r.Filled += wrote.N
	if r.FilledMin == nil || lo < *r.FilledMin {
		r.FilledMin = &lo
	}
	if r.FilledMax == nil || hi > *r.FilledMax {
		r.FilledMax = &hi
	}
}

func (p *invocation) setWatermark(w int64) {
	if w > p.st.Watermark {
		p.st.Watermark = w
	}
}

func (p *invocation) setCycle(c *Cycle) {
	if c == nil && p.st.Cycle == nil {
		return
	}
	p.st.Cycle, p.st.ProofBlockedSince, p.blocked, p.dirty = c, nil, nil, true
}

// renewDue: the lease wants renewing (pass.Holding.RenewDue).
func (p *invocation) renewDue() bool { return p.hold.RenewDue() }

// checkpoint saves the state and renews the lease, and learns whether a
// successor waits.
func (p *invocation) checkpoint(ctx context.Context) error {
	if !p.dirty && p.st.Watermark == p.saved {
		return pass.WrapUnlessLost("renew the lease", p.hold.Renew(ctx, p.s.state.renew, nil, nil))
	}
	var w int64
	if err := p.hold.Renew(ctx, p.s.state.checkpoint, stateArgs(p.st), scanned(&w)); err != nil {
		return pass.WrapUnlessLost("save fill state", err)
	}
	// GREATEST keeps a late save from moving the stored watermark back.
	p.st.Watermark = max(p.st.Watermark, w)
	p.dirty, p.saved = false, p.st.Watermark
	return nil
}

// handOver gives the lease to the waiting successor with the state, then
// watches until the successor acts as owner (pass.Holding.HandOver): done
// is true then, or when the budget ends first; false when the pass took
// the lease back from a successor that never renewed, and carries on.
func (p *invocation) handOver(ctx context.Context) (done bool, err error) {
	done, err = p.hold.HandOver(ctx, p.s.state.handOver, stateArgs(p.st), scanned(nil))
	if err == nil || done {
		p.dirty, p.saved = false, p.st.Watermark
	}
	return done, err
}

// close ends the pass: the blockers' names when the proof is blocked, the
// state and the lease (released), and the result. A statement the budget
// ended is a normal end, named in TimedOut. The lease is given back on
// every way out, errors included (pass.Holding.Close).
func (p *invocation) close(ctx context.Context, err error) error {
	if errors.Is(err, pass.ErrBudget) && !errors.Is(err, pass.ErrNotSent) {
		// A statement the budget ended: most often one waiting on a lock.
		p.res.wait(WaitingBudget)
	}
	if p.res.WaitingFor() == WaitingProof && p.blocked != nil {
		fctx := p.run.Finishing(ctx)
		if b, lerr := p.s.proof.listBlockers(fctx, p.run.Q, *p.blocked); lerr == nil {
			p.res.BlockedBy = b
		} else {
			p.s.kit.Warn(ctx, "could not name the sessions holding the proof", slog.String("error", lerr.Error()))
		}
	}
	fctx, gaveBack, err := p.hold.Finish(ctx, err, pass.Rider{Ride: p.s.state.finish, Args: stateArgs(p.st), Read: scanned(nil)})
	if gaveBack && err == nil {
		p.countSkips(fctx)
	}
	p.report()
	p.res.LeaseWaitMS, p.res.HandedOver, p.res.TakenBack = p.hold.WaitMS, p.hold.HandedOver, p.hold.TakenBack
	p.res.Retries = p.run.Retries
	return p.run.Close(&p.res.Summary, err)
}

// countSkips reports the placeholders operators wrote with skip-stall
// since a pass last counted them: the watermark passes them like its own,
// and OperatorFilled shows them beside Filled. After the lease is given
// back, so the statement can never delay the hand-over; a failure costs
// only the figure, which the next pass reports.
func (p *invocation) countSkips(ctx context.Context) {
	n, err := p.s.skips.TakeUnreported(ctx, p.run.Q)
	if err != nil {
		p.s.kit.Warn(ctx, "could not count operator placeholders", slog.String("error", err.Error()))
		return
	}
	p.res.OperatorFilled = n
}

// report copies the state into the result.
func (p *invocation) report() {
	r, st, now := p.res, p.st, p.s.kit.Now()
	r.Watermark, r.Head, r.Started = st.Watermark, p.head, st.Started
	r.Lag, r.StalledAt, r.Cycle, r.Historical = 0, nil, nil, false
	r.StallAgeSeconds, r.ProofBlockedSeconds = 0, 0
	if st.Started && r.headRead && p.head > st.Watermark {
		r.Lag = p.head - st.Watermark
		next := st.Watermark + 1
		r.StalledAt = &next
	}
	if c := st.Cycle; c != nil {
		v := &CycleView{From: c.From, FirstSeenAt: c.FirstSeenAt, Historical: c.Historical, Marker: c.Marker}
		if c.Marker != nil {
			h := c.MarkerHead
			v.MarkerHead = &h
		}
		r.Cycle, r.Historical = v, c.Historical
		r.StallAgeSeconds = stallAge(c, now).Seconds()
	}
	if st.ProofBlockedSince != nil {
		r.ProofBlockedSeconds = max(now.Sub(*st.ProofBlockedSince), 0).Seconds()
	}
}

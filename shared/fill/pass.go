package fill

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	kit "github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// finishAllowance is how long after the budget's end the last statements
// (the blockers' names, the state, the lease) may take. kit.Margin
// keeps 2s before Lambda's deadline, so they, the log line and the metrics
// all land before it.
const finishAllowance = time.Second

// leasePoll is how often a waiting successor looks at the lease, and how
// often a holder that handed it over looks for the successor's first
// renewal: the holder hands over at its next tick, so waiting costs at
// most a tick and a poll.
const leasePoll = 100 * time.Millisecond

// successorTTL is how long one registration as successor lasts; the
// waiter refreshes it every poll, so a waiter that died is ignored after
// half a second.
const successorTTL = 5 * leasePoll

// ackWindow is how long a holder that handed its lease over waits for the
// successor's first renewal before it takes the lease back: the successor
// sees the hand-over within a poll and renews at the end of its first
// step (a tick's statements); never under minAck, which a loaded
// database or a pooler may take for those few statements.
func ackWindow(tick time.Duration) time.Duration {
	return max(tick, minAck) + leasePoll
}

const minAck = 300 * time.Millisecond

// lastTry is how often the last statement (the state and the lease given
// back) is sent again after a transient error, within the finish
// allowance.
const lastTry = 100 * time.Millisecond

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

// pass is one invocation's working state.
type pass struct {
	s       *Service
	bounded *kit.Bounded
	q       *kit.Counting
	owner   string
	start   time.Time
	end     time.Time // the budget's end: every statement of the work ends by it
	hardEnd time.Time // the last statements end by this
	res     *Result

	held bool
	// leaseUnknown: the last statement that takes the lease was lost with
	// its connection, so the pass may hold it without knowing.
	leaseUnknown bool
	// ackOwed: the lease was handed to this pass, and its predecessor
	// watches for its first renewal, which is therefore due at once.
	ackOwed bool
	st      State
	head    int64
	// dirty: the cycle or the proof changed, which a checkpoint writes at
	// once (a hand-over or a crash must not lose a stall's first sighting
	// or a blocked proof). A watermark that only moved on waits for the
	// next lease renewal: one statement per tick fewer while writers are
	// busy, and the finish writes it anyway.
	dirty     bool
	renewed   time.Time // the last lease renewal, on the pass's clock
	successor bool      // a successor waits: hand over and end
	graceDue  time.Time // when the grace of the stall in hand ends
	blocked   *uint64   // the marker whose proof was last seen blocked
	heads     headLog   // when the head was seen reaching which sequence
}

// RunOnce runs one pass. Waiting (grace, proof, lease, budget) is a normal
// outcome, and so is a statement that ran out of the budget (it is named in
// TimedOut); an error means the database failed for the rest of the budget,
// or ctx ended. The persisted state is always one a later pass continues
// from.
func (s *Service) RunOnce(ctx context.Context) (*Result, error) {
	start := s.opts.Now()
	end := start.Add(kit.For(ctx, s.cfg.PassBudget, start))
	b := &kit.Bounded{DB: s.db, Deadline: end, Now: s.opts.Now}
	p := &pass{
		s:       s,
		bounded: b,
		q:       &kit.Counting{Q: b},
		owner:   newOwner(),
		start:   start,
		end:     end,
		hardEnd: end.Add(finishAllowance),
		res:     &Result{BlockedBy: []Blocker{}},
	}
	err := p.run(ctx)
	return p.res, p.close(ctx, err)
}

// run takes the lease and works, retrying transient database errors
// (a dropped connection, a restart, a failover) while the budget lasts:
// the persisted state is the checkpoint, and the pool dials afresh.
func (p *pass) run(ctx context.Context) error {
	for {
		err := p.attempt(ctx)
		if err == nil || !kit.Transient(err) || ctx.Err() != nil {
			return err
		}
		if !p.pause(ctx, p.s.cfg.Tick) {
			return err
		}
		p.res.Retries++
		p.s.opts.Logger.WarnContext(ctx, "fill: retrying after a transient database error", slog.String("error", err.Error()))
	}
}

// attempt takes the lease and works. A watching pass that loses its lease
// (taken back by a predecessor that missed its first renewal, or taken
// over while a statement of its was blocked past the lease) waits to be
// handed it again, so it still watches if the other pass ends.
func (p *pass) attempt(ctx context.Context) error {
	for {
		if err := p.acquire(ctx); err != nil || !p.held {
			return err
		}
		err := p.work(ctx)
		if !errors.Is(err, errLeaseLost) {
			return err
		}
		p.held, p.ackOwed = false, false
		p.res.wait(WaitingLease)
		if p.s.cfg.Bounded || !p.pause(ctx, leasePoll) {
			return nil
		}
	}
}

// acquire takes the lease, or — a watching pass — waits to be handed it
// while its budget lasts. Either way it loads the state.
func (p *pass) acquire(ctx context.Context) error {
	watch := !p.s.cfg.Bounded
	since, waited := p.s.opts.Now(), p.res.LeaseWaitMS
	for polls := 0; ; polls++ {
		if polls > 0 {
			p.res.LeaseWaitMS = waited + p.s.opts.Now().Sub(since).Milliseconds()
			if hook := p.s.onLease; hook != nil {
				hook(leasePolling, p.owner)
			}
		}
		st, took, handed, err := p.s.lease.acquireLease(ctx, p.q, p.owner, p.s.opts.LeaseTTL, watch, successorTTL)
		if p.leaseUnknown = outcomeUnknown(err); err != nil {
			return err
		}
		p.st = st
		if took {
			p.held, p.dirty, p.renewed, p.ackOwed = true, false, p.s.opts.Now(), handed
			p.res.Waiting = nil
			if hook := p.s.onLease; hook != nil {
				hook(leaseTaken, p.owner)
			}
			return nil
		}
		if hook := p.s.onLease; hook != nil && watch {
			hook(leaseRegistered, p.owner)
		}
		p.res.wait(WaitingLease)
		if !watch || !p.pause(ctx, leasePoll) {
			// One working pass per schema; a bounded pass returns at once.
			return nil
		}
	}
}

// work runs steps until the budget ends, a successor takes over, or (a
// bounded pass) there is nothing left to do now.
func (p *pass) work(ctx context.Context) error {
	for {
		out, err := p.step(ctx)
		if err != nil {
			return err
		}
		if out == leaseGone {
			return errLeaseLost
		}
		if out == caughtUp && p.s.cfg.Bounded {
			p.res.Waiting = nil
			return nil // the finish writes the state
		}
		if err := p.maybeCheckpoint(ctx); err != nil {
			return err
		}
		wait, waiting := p.next(out)
		p.res.Waiting = nil
		if waiting != "" {
			p.res.wait(waiting)
		}
		switch {
		case p.successor:
			// The next invocation is here: it carries on from the state
			// the hand-over writes, within a poll.
			if done, err := p.handOver(ctx); err != nil || done {
				return err
			}
			continue
		case wait < 0:
			return nil
		case wait == 0:
			continue
		}
		if !p.pause(ctx, wait) {
			return ctx.Err()
		}
	}
}

// next is what the pass does after a step: how long to wait before the
// next one (0: at once; negative: end the pass), and what it is waiting
// for meanwhile.
func (p *pass) next(out outcome) (time.Duration, string) {
	tick := p.s.cfg.Tick
	switch out {
	case progress:
		if !p.timeLeft() {
			return -1, WaitingBudget
		}
		return 0, ""
	case outOfTime:
		return -1, WaitingBudget
	case inGrace:
		if p.s.cfg.Bounded && !p.graceDue.Before(p.end) {
			// Not due within the budget: a later pass fills it.
			return -1, WaitingGrace
		}
		// Waited out in short steps, re-reading each time: a late commit
		// ends the stall early, at no write.
		return min(tick, max(p.graceDue.Sub(p.s.opts.Now()), time.Millisecond)), WaitingGrace
	case inProof:
		return tick, WaitingProof
	}
	return tick, "" // caught up, watching
}

// step is one look: the head, the watermark over whatever is present, and
// the cycle of the stall it stops at.
func (p *pass) step(ctx context.Context) (outcome, error) {
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
	now := p.s.opts.Now()
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
	began := p.s.opts.Now()
	done, err := p.fillCycle(ctx)
	p.res.FillMS += p.s.opts.Now().Sub(began).Milliseconds()
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
func (p *pass) readHead(ctx context.Context) (o outcome, held bool, err error) {
	p.res.Ticks++
	tick, err := p.s.lease.pollTick(ctx, p.q, p.owner)
	if err != nil {
		return 0, false, err
	}
	if !tick.Held {
		return leaseGone, false, nil
	}
	p.successor = tick.Successor
	p.head, p.res.headRead = tick.Head, true
	p.heads.add(p.s.opts.Now(), p.head, max(p.s.cfg.Grace, 0)+p.s.cfg.Tick)
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
func (p *pass) prove(ctx context.Context, c *Cycle, now time.Time) (o outcome, proven bool, err error) {
	proof, err := p.s.proof.checkProof(ctx, p.q, *c.Marker)
	if err != nil {
		return 0, false, err
	}
	switch proof {
	case proofForeign:
		p.s.opts.Logger.WarnContext(ctx, "fill: the persisted marker is not this cluster's (restored state, logical replication or a blue/green switch-over): discarding it and taking a fresh one",
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
func (p *pass) advance(ctx context.Context) (more bool, err error) {
	for p.st.Watermark < p.head {
		page, err := p.s.events.PresentAfter(ctx, p.q, p.st.Watermark, p.s.cfg.PageSize)
		if err != nil {
			return false, err
		}
		w, rest := advance(p.st.Watermark, page)
		p.setWatermark(w)
		if len(rest) > 0 || len(page) < p.s.cfg.PageSize {
			return false, nil
		}
		if !p.timeLeft() {
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
func (p *pass) takeMarker(ctx context.Context) error {
	c := p.st.Cycle
	h := markerHead(*c, p.st.HistoricalHead, p.head)
	if !c.Historical {
		var err error
		if h, err = p.s.events.Head(ctx, p.q); err != nil {
			return err
		}
		p.head = max(p.head, h)
	}
	if hook := p.s.afterHeadRead; hook != nil {
		hook(h)
	}
	m, err := p.s.state.assignMarker(ctx, p.q, p.owner, *c, h, p.s.opts.LeaseTTL)
	if err != nil {
		return err
	}
	c.Marker, c.MarkerHead = &m, h
	p.st.ProofBlockedSince = nil
	p.renewed, p.ackOwed = p.s.opts.Now(), false
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
func (p *pass) fillCycle(ctx context.Context) (bool, error) {
	c := p.st.Cycle
	g := newGapCursor(p.st.Watermark, min(c.MarkerHead, p.head))
	limit := p.s.cfg.BatchLimit
	pending := make([]int64, 0, limit)
	for {
		if g.needPage() {
			if !p.timeLeft() {
				return false, nil
			}
			page, err := p.s.events.PresentAfter(ctx, p.q, g.pos, p.s.cfg.PageSize)
			if err != nil {
				return false, err
			}
			g.feed(page, p.s.cfg.PageSize)
			// Read after the proof passed, so every sequence below the
			// first present row is missing for good (§3.3).
			first := int64(0)
			if len(page) > 0 {
				first = page[0]
			}
			if to := passOverPrefix(g.pos, first, g.top, c.Historical, p.s.cfg.PageSize); to > g.pos {
				g.skipTo(to)
				p.setWatermark(g.pos)
				p.res.PassedOver += g.pos
				p.dirty = true
			}
		}
		pending = append(pending, g.next(limit-len(pending))...)
		switch {
		case len(pending) == limit || g.done() && len(pending) > 0:
			if !p.timeLeft() {
				return false, nil
			}
			if hook := p.s.beforeInsert; hook != nil {
				hook(pending)
			}
			wrote, err := p.s.events.InsertMissing(ctx, p.q, pending, store.FilledByFill)
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

func (p *pass) recordFilled(wrote store.Written) {
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

func (p *pass) setWatermark(w int64) {
	if w > p.st.Watermark {
		p.st.Watermark = w
	}
}

func (p *pass) setCycle(c *Cycle) {
	if c == nil && p.st.Cycle == nil {
		return
	}
	p.st.Cycle, p.st.ProofBlockedSince, p.blocked, p.dirty = c, nil, nil, true
}

// maybeCheckpoint saves the state when it changed, and renews the lease a
// few times per lease period however quiet the pass is.
func (p *pass) maybeCheckpoint(ctx context.Context) error {
	if !p.dirty && !p.renewDue() {
		return nil
	}
	return p.checkpoint(ctx)
}

// renewDue: a third of the lease period has passed since it was renewed,
// or a predecessor waits for the first renewal.
func (p *pass) renewDue() bool {
	return p.ackOwed || p.s.opts.Now().Sub(p.renewed) >= p.s.opts.LeaseTTL/3
}

// checkpoint saves the state and renews the lease.
func (p *pass) checkpoint(ctx context.Context) error {
	w, successor, err := p.s.state.checkpointState(ctx, p.q, p.owner, p.st, p.s.opts.LeaseTTL)
	if err != nil {
		return err
	}
	p.st.Watermark = max(p.st.Watermark, w)
	p.successor = p.successor || successor
	p.dirty, p.renewed, p.ackOwed = false, p.s.opts.Now(), false
	return nil
}

// handOver gives the lease to the waiting successor with the state, then
// watches, read-only, until the successor acts as owner (its first
// renewal): done is true then, or when the budget ends first. A
// successor that never renews (it died after registering, after being
// handed the lease, or before its first renewal) has the lease taken back
// after ackWindow, and the pass carries on as before (done false).
func (p *pass) handOver(ctx context.Context) (done bool, err error) {
	p.successor = false
	handed, err := p.s.lease.handOverLease(ctx, p.q, p.owner, p.st, p.s.opts.LeaseTTL)
	if err != nil {
		return false, err
	}
	p.dirty, p.renewed = false, p.s.opts.Now()
	if !handed {
		return false, nil // the registration lapsed since the tick
	}
	p.held, p.res.HandedOver = false, true
	ack := ackWindow(p.s.cfg.Tick)
	for {
		if !p.pause(ctx, leasePoll) {
			// The budget ends first: the successor has the lease, and if
			// it died, the lease expires on its own.
			return true, ctx.Err()
		}
		w, err := p.s.lease.handOverState(ctx, p.q, p.owner, ack)
		switch {
		case err != nil && kit.Transient(err) && ctx.Err() == nil:
			// Still watching: the next poll reads again.
			p.res.Retries++
			continue
		case err != nil:
			return true, err
		case w.Owned:
			// A take-back whose answer was lost with its connection.
		case !w.Pending:
			return true, nil
		case !w.Due:
			continue
		default:
			ok, err := p.s.lease.takeLeaseBack(ctx, p.q, p.owner, p.s.opts.LeaseTTL)
			p.leaseUnknown = outcomeUnknown(err)
			if err != nil && kit.Transient(err) && ctx.Err() == nil {
				p.res.Retries++
				continue
			}
			if err != nil || !ok {
				return true, err // !ok: it renewed just now
			}
		}
		// The state is the one the hand-over wrote: a successor that
		// wrote anything had renewed.
		p.leaseUnknown = false
		p.s.opts.Logger.WarnContext(ctx, "fill: the successor never acted as owner: took the lease back",
			slog.Duration("waited", ack))
		p.held, p.renewed, p.res.HandedOver = true, p.s.opts.Now(), false
		p.res.TakenBack++
		return false, nil
	}
}

// timeLeft says another statement may start.
func (p *pass) timeLeft() bool { return p.s.opts.Now().Before(p.end) }

// stepReserve is kept back from the budget's end after a pause: a step's
// statements take a few milliseconds (more through a pooler), and a step
// begun with less left would end on a statement it had no time to send.
const stepReserve = 50 * time.Millisecond

// pause sleeps d, and says false instead when d would reach the budget's
// end: the pass then ends with what it has, rather than wake to send a
// statement with no time left.
func (p *pass) pause(ctx context.Context, d time.Duration) bool {
	if !p.s.opts.Now().Add(d + stepReserve).Before(p.end) {
		return false
	}
	return kit.Sleep(ctx, d) == nil
}

// close ends the pass: the blockers' names when the proof is blocked, the
// state and the lease (released), and the result. A statement the budget
// ended is a normal end, named in TimedOut. The lease is given back on
// every way out, errors included: with the state when the pass holds it,
// bare when it may hold it without knowing (the statement that took it was
// lost with its connection), so the next pass never waits out its expiry.
func (p *pass) close(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, kit.ErrNotSent):
		// The pass ran out between statements: it ends as it stood.
		err = nil
	case errors.Is(err, kit.ErrBudget):
		// A statement the budget ended: most often one waiting on a lock.
		p.res.TimedOut, err = err.Error(), nil
		p.res.wait(WaitingBudget)
	}
	// A fresh context: a cancelled invocation still gives its lease back
	// (and the pool re-dials a dropped connection). The hard end bounds it.
	fctx := context.WithoutCancel(ctx)
	p.bounded.Deadline = p.hardEnd
	if p.res.WaitingFor() == WaitingProof && p.blocked != nil {
		if b, lerr := p.s.proof.listBlockers(fctx, p.q, *p.blocked); lerr == nil {
			p.res.BlockedBy = b
		} else {
			p.s.opts.Logger.WarnContext(ctx, "fill: could not name the sessions holding the proof", slog.String("error", lerr.Error()))
		}
	}
	gaveBack := p.res.HandedOver
	switch {
	case p.held:
		ferr := p.lastStatement(func() error { return p.s.lease.finishPass(fctx, p.q, p.owner, p.st) })
		switch {
		case ferr == nil:
			p.held, gaveBack = false, true
		case errors.Is(ferr, kit.ErrBudget) && err == nil:
			// The lease expires on its own.
			p.res.TimedOut = ferr.Error()
		case err == nil && !errors.Is(ferr, errLeaseLost):
			err = ferr
		}
	case p.leaseUnknown:
		if rerr := p.lastStatement(func() error { return p.s.lease.releaseLease(fctx, p.q, p.owner) }); rerr != nil {
			p.s.opts.Logger.WarnContext(ctx, "fill: could not give the lease back; it expires on its own", slog.String("error", rerr.Error()))
		}
	}
	if gaveBack && err == nil {
		p.countSkips(fctx)
	}
	p.report()
	p.res.Statements = p.q.Count()
	p.res.DurationMS = p.s.opts.Now().Sub(p.start).Milliseconds()
	if err != nil {
		p.res.Error = err.Error()
	}
	return err
}

// outcomeUnknown says a statement that takes the lease may have done so
// although the pass did not hear back: it reached the server, or may have,
// and no answer came (the connection was lost). A server's error, or a
// statement never sent, took nothing.
func outcomeUnknown(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && !errors.Is(err, kit.ErrNotSent) && !errors.As(err, &pgErr)
}

// lastStatement sends one of the pass's last statements, again after a
// transient error (the server restarting, a dropped connection) every
// lastTry while the finish allowance lasts.
func (p *pass) lastStatement(send func() error) error {
	for {
		err := send()
		if err == nil || !kit.Transient(err) || !p.s.opts.Now().Add(lastTry).Before(p.hardEnd) {
			return err
		}
		time.Sleep(lastTry)
	}
}

// countSkips reports the placeholders operators wrote with skip-stall
// since a pass last counted them: the watermark passes them like its own,
// and OperatorFilled shows them beside Filled. After the lease is given
// back, so the statement can never delay the hand-over; a failure costs
// only the figure, which the next pass reports.
func (p *pass) countSkips(ctx context.Context) {
	n, err := p.s.skips.TakeUnreported(ctx, p.q)
	if err != nil {
		p.s.opts.Logger.WarnContext(ctx, "fill: could not count operator placeholders", slog.String("error", err.Error()))
		return
	}
	p.res.OperatorFilled = n
}

// report copies the state into the result.
func (p *pass) report() {
	r, st, now := p.res, p.st, p.s.opts.Now()
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

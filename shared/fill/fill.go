// Package fill is the fill function's logic (DESIGN §3, §4): one bounded
// pass that finds sequence gaps left by rolled-back or crashed writers,
// proves each gap abandoned, and writes placeholder rows so ordered
// consumers never stall.
//
// It is the serverless form of obix's resident gap filler: the state that
// task kept in memory (the stall episode and its marker, the historical
// marker and proof, the cursor) lives in <schema>.fill_state between
// invocations, and a lease row stands in for "one task per process".
// Every statement is autocommit: the pass never holds a transaction (or a
// snapshot that would pin the very horizon it waits on) while it waits.
package fill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/budget"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/metrics"
	"github.com/outboxkeeper/outboxkeeper/shared/store"
)

// Waiting values of Result.Waiting.
const (
	WaitingGrace  = "grace"  // a stall is inside its grace, which outlasts the budget
	WaitingProof  = "proof"  // a transaction older than the marker still runs
	WaitingLease  = "lease"  // another pass holds the lease
	WaitingBudget = "budget" // work remains but the budget is spent
)

// Defaults for Options.
const (
	// DefaultProofPoll is the proof's polling cadence: the proof waits on
	// transactions ending, which is quick, so it polls faster than the
	// schedule. It is also the re-read cadence while a grace is waited out.
	DefaultProofPoll = 250 * time.Millisecond
	// DefaultLeaseMargin is added to the pass budget to make the lease: a
	// pass never outlives its budget by more than its last statements, and
	// a crashed one blocks the next for at most budget + margin.
	DefaultLeaseMargin = 10 * time.Second
	// MaxBlockers caps blocked_by.
	MaxBlockers = 5
)

// Options are the injectable parts of a Service.
type Options struct {
	// Now is the clock for grace and budget decisions; time.Now by default.
	// The lease uses the database clock.
	Now func() time.Time
	// Logger receives the one line per pass; slog.Default() by default.
	Logger *slog.Logger
	// Metrics receives the EMF line per pass; metrics.New("fill") by default.
	Metrics *metrics.Emitter
	// ProofPoll overrides DefaultProofPoll.
	ProofPoll time.Duration
	// LeaseMargin overrides DefaultLeaseMargin.
	LeaseMargin time.Duration
}

// Service runs fill passes against one outbox schema.
type Service struct {
	db      store.Querier
	events  *store.Events
	state   *stateSQL
	horizon horizonSQL
	cfg     config.Fill
	opts    Options

	// afterHeadRead runs between the head read and the marker assignment
	// (§3.2). Tests use it to start a writer exactly there.
	afterHeadRead func(ctx context.Context, head int64)
}

// New validates cfg and builds a Service. db is normally the function's
// pool: every statement is autocommit, so consecutive statements may use
// different connections, and a dropped connection is re-dialled.
func New(db store.Querier, schema store.Schema, cfg config.Fill, opts Options) (*Service, error) {
	switch {
	case db == nil:
		return nil, errors.New("fill: nil database")
	case schema.Name() == "":
		return nil, errors.New("fill: empty schema")
	case cfg.Grace < 0:
		return nil, fmt.Errorf("fill: grace %s is negative", cfg.Grace)
	case cfg.BatchLimit < 1:
		return nil, fmt.Errorf("fill: batch limit %d must be at least 1", cfg.BatchLimit)
	case cfg.PageSize < 1:
		return nil, fmt.Errorf("fill: page size %d must be at least 1", cfg.PageSize)
	case cfg.PassBudget <= 0:
		return nil, fmt.Errorf("fill: pass budget %s must be positive", cfg.PassBudget)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Metrics == nil {
		opts.Metrics = metrics.New("fill")
	}
	if opts.ProofPoll <= 0 {
		opts.ProofPoll = DefaultProofPoll
	}
	if opts.LeaseMargin <= 0 {
		opts.LeaseMargin = DefaultLeaseMargin
	}
	return &Service{
		db:      db,
		events:  store.NewEvents(schema),
		state:   newStateSQL(schema),
		horizon: newHorizonSQL(),
		cfg:     cfg,
		opts:    opts,
	}, nil
}

// Blocker is a session holding the horizon back past the marker.
type Blocker struct {
	PID   int32  `json:"pid"`
	State string `json:"state"`
	// XactAgeSeconds is how long its transaction has run; null when the
	// role cannot see it (needs pg_read_all_stats for other roles).
	XactAgeSeconds *float64 `json:"xact_age_s"`
	// XIDAge is how many transactions ago its xid (or snapshot xmin) was
	// assigned: visible for every session.
	XIDAge          int64  `json:"xid_age"`
	ApplicationName string `json:"application_name"`
	BackendXID      string `json:"backend_xid,omitempty"`
	BackendXmin     string `json:"backend_xmin,omitempty"`
}

// Result is what one pass did: the Lambda response, the log line and what
// tests assert on (DESIGN §4).
type Result struct {
	Watermark int64 `json:"watermark"`
	Head      int64 `json:"head"`
	Lag       int64 `json:"lag"`
	// Filled counts placeholders this pass wrote; FilledMin/Max bound them.
	Filled    int64  `json:"filled"`
	FilledMin *int64 `json:"filled_min"`
	FilledMax *int64 `json:"filled_max"`
	// StalledAt is the missing sequence W+1 the pass ended stalled on.
	StalledAt *int64 `json:"stalled_at"`
	// Waiting says why work remains: null, grace, proof, lease or budget.
	Waiting   *string   `json:"waiting"`
	BlockedBy []Blocker `json:"blocked_by"`
	// Historical is true when the stall is a gap present at the first run.
	Historical bool `json:"historical"`
	// Episode is the stall episode the pass ended with, if any.
	Episode             *EpisodeView `json:"episode"`
	StallAgeSeconds     float64      `json:"stall_age_s"`
	ProofBlockedSeconds float64      `json:"proof_blocked_s"`
	// MarkersTaken counts marker xids this pass assigned (one per episode,
	// one for all historical gaps; none while an episode keeps its own).
	MarkersTaken int `json:"markers_taken"`
	// Started is false until the table has had a row to anchor on.
	Started    bool   `json:"started"`
	Statements int64  `json:"statements"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`

	// headRead is false when the pass ended before reading the head (it
	// waited on the lease, or failed first): Head and Lag then say
	// nothing, and no position metric is emitted for it.
	headRead bool
}

// EpisodeView is the persisted episode as reported.
type EpisodeView struct {
	From        int64     `json:"from"`
	FirstSeenAt time.Time `json:"first_seen_at"`
	Marker      *string   `json:"marker"`
	MarkerHead  *int64    `json:"marker_head"`
}

func (r *Result) wait(why string) { r.Waiting = &why }

// String is the Result as its JSON response, so a printed Result shows
// waiting, episode and blockers by value rather than as pointers.
func (r *Result) String() string {
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Sprintf("unprintable fill result: %v", err)
	}
	return string(b)
}

// WaitingFor is Result.Waiting or "".
func (r *Result) WaitingFor() string {
	if r.Waiting == nil {
		return ""
	}
	return *r.Waiting
}

// pass is one invocation's working state.
type pass struct {
	s        *Service
	q        *store.Counting
	owner    string
	deadline time.Time
	lease    time.Duration
	st       State
	head     int64
	res      *Result
}

// RunOnce runs one bounded pass. Waiting (grace, proof, lease, budget) is
// a normal outcome; an error means a statement failed or ctx ended, and
// the persisted state is still one the next pass continues from.
func (s *Service) RunOnce(ctx context.Context) (*Result, error) {
	start := s.opts.Now()
	b := budget.For(ctx, s.cfg.PassBudget, start)
	p := &pass{
		s:        s,
		q:        &store.Counting{Q: s.db},
		owner:    newOwner(),
		deadline: start.Add(b),
		// The lease outlives the pass's budget by a margin; every save
		// renews it, so a long wait inside the budget never loses it.
		lease: s.cfg.PassBudget + s.opts.LeaseMargin,
		res:   &Result{BlockedBy: []Blocker{}},
	}
	err := p.run(ctx)
	p.report() // also after an error: what the pass had reached
	res := p.res
	now := s.opts.Now()
	res.Statements = p.q.Count()
	res.DurationMS = now.Sub(start).Milliseconds()
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

func (p *pass) run(ctx context.Context) (err error) {
	st, took, err := p.s.state.acquireLease(ctx, p.q, p.owner, p.lease)
	if err != nil {
		return err
	}
	p.st = st
	p.report()
	if !took {
		// One working pass per schema; this one returns at once.
		p.res.wait(WaitingLease)
		return nil
	}
	defer func() {
		if err == nil {
			return
		}
		// Give the lease back so the next pass need not wait for it to
		// expire; on a context that ended, or a connection that dropped,
		// with a fresh context (the pool re-dials). If this fails too the
		// lease expires on its own.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = p.s.state.releaseLease(rctx, p.q, p.owner)
	}()

	if p.head, err = p.s.events.Head(ctx, p.q); err != nil {
		return err
	}
	p.res.headRead = true
	if !p.st.Started {
		lowest, err := p.s.events.Lowest(ctx, p.q)
		if err != nil {
			return err
		}
		w, ok := initialWatermark(lowest, p.head, p.s.cfg.PageSize)
		if !ok {
			return p.finish(ctx, "")
		}
		// The historical boundary is the head read above: strictly before
		// any historical marker, which a later statement assigns.
		p.st.Started, p.st.Watermark, p.st.HistoricalHead = true, w, p.head
	}
	waiting, err := p.loop(ctx)
	if err != nil {
		return err
	}
	return p.finish(ctx, waiting)
}

// loop pages forward from the watermark and works the stall it ends on,
// until caught up or waiting; it returns why it stopped ("" = caught up).
func (p *pass) loop(ctx context.Context) (string, error) {
	s := p.s
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		w := p.st.Watermark
		if w >= p.head {
			// Caught up with everything allocated when the head was read:
			// a healthy pass ends here without reading a page.
			p.st.Episode, p.st.ProofBlockedSince = nil, nil
			return "", nil
		}
		page, err := s.events.PresentAfter(ctx, p.q, w, s.cfg.PageSize)
		if err != nil {
			return "", err
		}
		w, rest := advance(w, page)
		p.st.Watermark = w
		if len(rest) == 0 && len(page) == s.cfg.PageSize {
			continue // a full contiguous page: read on
		}
		if !stalled(w, p.head, rest) {
			p.st.Episode, p.st.ProofBlockedSince = nil, nil
			return "", nil
		}
		if !s.opts.Now().Before(p.deadline) {
			return WaitingBudget, nil
		}

		if historical(p.st, w) {
			done, waiting, err := p.fillHistorical(ctx, w, rest)
			if err != nil || !done {
				return waiting, err
			}
			continue
		}

		now := s.opts.Now()
		ep, fresh := decideEpisode(p.st.Episode, w, now, s.cfg.PageSize)
		p.st.Episode = &ep
		if fresh {
			// Persist when the stall was first seen: the grace counts
			// from here whichever pass ends up filling it.
			p.st.ProofBlockedSince = nil
			if err := p.save(ctx, assignNone); err != nil {
				return "", err
			}
		}
		switch decideGrace(ep, s.cfg.Grace, now, p.deadline) {
		case graceLater:
			return WaitingGrace, nil
		case graceWait:
			// Wait in short steps and re-read the window each time: a late
			// commit ends the stall early, at no write.
			due := ep.FirstSeenAt.Add(s.cfg.Grace)
			if err := budget.Sleep(ctx, min(s.opts.ProofPoll, due.Sub(now))); err != nil {
				return "", err
			}
			continue
		}

		if p.st.Episode.Marker == nil {
			if err := p.takeMarker(ctx); err != nil {
				return "", err
			}
		}
		proven, err := p.prove(ctx, *p.st.Episode.Marker)
		if err != nil || !proven {
			return WaitingProof, err
		}
		end := p.st.Episode.windowEnd(s.cfg.PageSize)
		done, err := p.fill(ctx, missingIn(w, end, rest))
		if err != nil {
			return "", err
		}
		if !done {
			return WaitingBudget, nil
		}
		// Re-read: the episode ends when the window is complete, or carries
		// on (same marker, same grace) if the stall is still inside it.
	}
}

// takeMarker reads the head, then — in a later statement — assigns and
// persists the episode's marker (§3.2). Every sequence at or below that
// head was allocated by a writer that already had its xid (§3.1), so its
// xid is older than the marker.
func (p *pass) takeMarker(ctx context.Context) error {
	h, err := p.s.events.Head(ctx, p.q)
	if err != nil {
		return err
	}
	if hook := p.s.afterHeadRead; hook != nil {
		hook(ctx, h)
	}
	p.head = max(p.head, h)
	p.st.Episode.MarkerHead = h
	p.res.MarkersTaken++
	return p.save(ctx, assignEpisode)
}

// fillHistorical works a gap that was there at the first run: no grace,
// one marker for all of them (any marker assigned after the first run's
// head read post-dates their writers), proven once (the horizon only moves
// forward), then batch-capped fills of (w, min(historical head, w+page)].
func (p *pass) fillHistorical(ctx context.Context, w int64, rest []int64) (done bool, waiting string, err error) {
	p.res.Historical = true
	if !p.st.HistoricalProven {
		if p.st.HistoricalMarker == nil {
			p.res.MarkersTaken++
			if err := p.save(ctx, assignHistorical); err != nil {
				return false, "", err
			}
		}
		proven, err := p.prove(ctx, *p.st.HistoricalMarker)
		if err != nil || !proven {
			return false, WaitingProof, err
		}
		p.st.HistoricalProven = true
	}
	end := min(p.st.HistoricalHead, w+int64(p.s.cfg.PageSize))
	done, err = p.fill(ctx, missingIn(w, end, rest))
	if err != nil || !done {
		return false, WaitingBudget, err
	}
	p.res.Historical = false
	return true, "", nil
}

// prove polls pg_snapshot_xmin(pg_current_snapshot()) > marker every
// ProofPoll within the budget (§3.3). When the budget runs out first it
// names the sessions holding the horizon and keeps the marker.
func (p *pass) prove(ctx context.Context, marker uint64) (bool, error) {
	for {
		ok, err := p.s.horizon.proofPassed(ctx, p.q, marker)
		if err != nil {
			return false, err
		}
		if ok {
			p.st.ProofBlockedSince = nil
			return true, nil
		}
		now := p.s.opts.Now()
		if !now.Add(p.s.opts.ProofPoll).Before(p.deadline) {
			break
		}
		if err := budget.Sleep(ctx, p.s.opts.ProofPoll); err != nil {
			return false, err
		}
	}
	blockers, err := p.s.horizon.listBlockers(ctx, p.q, marker)
	if err != nil {
		return false, err
	}
	p.res.BlockedBy = blockers
	if p.st.ProofBlockedSince == nil {
		t := p.s.opts.Now()
		p.st.ProofBlockedSince = &t
	}
	return false, nil
}

// fill writes placeholders for missing, at most BatchLimit per insert and
// as many inserts as the budget allows; each insert notifies the range it
// wrote.
// Only proven-abandoned sequences at or below a marker head reach here;
// the insert itself never overwrites (§3.5). done is false when the budget
// ran out first.
func (p *pass) fill(ctx context.Context, missing []int64) (done bool, err error) {
	var wrote []int64
	done = true
	for _, batch := range batches(missing, p.s.cfg.BatchLimit) {
		if !p.s.opts.Now().Before(p.deadline) {
			done = false
			break
		}
		seqs, err := p.s.events.InsertPlaceholders(ctx, p.q, batch, store.FilledByFill)
		if err != nil {
			return false, err
		}
		wrote = append(wrote, seqs...)
	}
	if len(wrote) > 0 {
		lo, hi := wrote[0], wrote[len(wrote)-1] // ascending: sorted batches, each returned in order
		p.res.Filled += int64(len(wrote))
		if p.res.FilledMin == nil || lo < *p.res.FilledMin {
			p.res.FilledMin = &lo
		}
		if p.res.FilledMax == nil || hi > *p.res.FilledMax {
			p.res.FilledMax = &hi
		}
	}
	return done, nil
}

// save checkpoints the state (renewing the lease), assigning a marker if
// asked.
func (p *pass) save(ctx context.Context, a assign) error {
	st, err := p.s.state.saveState(ctx, p.q, p.owner, p.st, a, p.lease, false)
	if err != nil {
		return err
	}
	p.st = st
	return nil
}

// finish writes the final state, releases the lease and fills in the
// result.
func (p *pass) finish(ctx context.Context, waiting string) error {
	st, err := p.s.state.saveState(ctx, p.q, p.owner, p.st, assignNone, p.lease, true)
	if err != nil {
		return err
	}
	p.st = st
	if waiting != "" {
		p.res.wait(waiting)
	}
	p.report()
	return nil
}

// report copies the state into the result.
func (p *pass) report() {
	r, st, now := p.res, p.st, p.s.opts.Now()
	r.Watermark, r.Head, r.Started = st.Watermark, p.head, st.Started
	r.Lag = 0
	if st.Started && p.head > st.Watermark {
		r.Lag = p.head - st.Watermark
	}
	r.StalledAt, r.Episode, r.StallAgeSeconds, r.ProofBlockedSeconds = nil, nil, 0, 0
	if r.Waiting != nil && *r.Waiting != WaitingLease {
		next := st.Watermark + 1
		r.StalledAt = &next
	}
	if ep := st.Episode; ep != nil {
		v := &EpisodeView{From: ep.From, FirstSeenAt: ep.FirstSeenAt}
		if ep.Marker != nil {
			m := strconv.FormatUint(*ep.Marker, 10)
			h := ep.MarkerHead
			v.Marker, v.MarkerHead = &m, &h
		}
		r.Episode = v
		r.StallAgeSeconds = stallAge(ep, now).Seconds()
	}
	if st.ProofBlockedSince != nil {
		r.ProofBlockedSeconds = max(now.Sub(*st.ProofBlockedSince), 0).Seconds()
	}
}

// Package pass is the machine every outboxkeeper function is, written once:
// a Config validated against its declared bounds, a budget of
// min(configured, Lambda deadline − Margin), every statement bounded by it
// and counted, transient errors retried inside it, the last statements
// (the state, the lease) sent on every way out, a lease with watching and
// a safe hand-over, and a Result that is at once the response, the log line
// and the metrics (Handler). Each pass keeps only its decisions and its
// SQL. docs/design.md §9 describes the shape.
package pass

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/setting"
)

// Off is the one "none" of a Config field: no grace, never dead, keep
// forever, no retries. A zero field means its default; a variable set to 0
// is handed over as Off (shared/config), where the field's Bound allows it.
const Off = -1

// Options are the injectable parts every pass has; each pass's Options
// embed them.
type Options struct {
	// Now is the pass's clock, for its budget and its own decisions;
	// time.Now by default. Leases and retention use the database clock.
	Now func() time.Time
	// Logger receives the one line per pass; slog.Default() by default.
	Logger *slog.Logger
	// Metrics receives the EMF line per pass; metrics.New(<pass>) by
	// default.
	Metrics *metrics.Emitter
}

// WithDefaults fills in every nil option for the pass called name.
func (o Options) WithDefaults(name string) Options {
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Logger = cmp.Or(o.Logger, slog.Default())
	o.Metrics = cmp.Or(o.Metrics, metrics.New(name))
	return o
}

// Kit is what a pass's Service is built on: its name (the prefix of its
// errors), its database, its configured budget and its options.
type Kit struct {
	Name   string
	DB     DB
	Budget time.Duration
	Options
}

// NewKit checks db and applies the options' defaults.
func NewKit(name string, db DB, budget time.Duration, opts Options) (*Kit, error) {
	if db == nil {
		return nil, &setting.Error{Pass: name, Field: "db", Value: nil, Reason: "must not be nil"}
	}
	return &Kit{Name: name, DB: db, Budget: budget, Options: opts.WithDefaults(name)}, nil
}

// Config is what Configure takes: a pass's Config, with a PassBudget
// field (a time.Duration), the budget of its passes.
type Config[C any] interface {
	Validate() error
	WithDefaults() C
}

// Configure validates cfg, applies its defaults and builds the kit of the
// pass called name on db, its budget cfg's PassBudget.
func Configure[C Config[C]](name string, db DB, cfg C, opts Options) (*Kit, C, error) {
	if err := cfg.Validate(); err != nil {
		return nil, cfg, err
	}
	cfg = cfg.WithDefaults()
	budget := reflect.ValueOf(cfg).FieldByName("PassBudget").Interface().(time.Duration)
	kit, err := NewKit(name, db, budget, opts)
	return kit, cfg, err
}

// Warn logs a warning of the pass, its message prefixed with the pass's
// name like its errors.
func (k *Kit) Warn(ctx context.Context, msg string, attrs ...slog.Attr) {
	k.Logger.LogAttrs(ctx, slog.LevelWarn, k.Name+": "+msg, attrs...)
}

// Summary is what every Result reports about the pass itself; the kit
// fills it (Run.Close).
type Summary struct {
	// TimedOut names the statement the budget ended, when it ended one (a
	// lock another session holds, most often).
	TimedOut string `json:"timed_out,omitempty"`
	// Statements is every statement the pass sent, retries included.
	Statements int64 `json:"statements"`
	// DurationMS is the pass's wall time.
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
}

// Level is the log line's level by the default rule: an error, a warning
// for a statement the budget ended, information otherwise.
func (s *Summary) Level(err error) slog.Level {
	switch {
	case err != nil:
		return slog.LevelError
	case s.TimedOut != "":
		return slog.LevelWarn
	}
	return slog.LevelInfo
}

// Run is one invocation of a pass: its budget, and the queriers every
// statement goes through, bounded by it and counted.
type Run struct {
	Budget
	kit *Kit
	// Q sends the pass's statements.
	Q *Counting
	// Retries counts transient errors the pass recovered from.
	Retries int

	mu       sync.Mutex
	bounded  []*Bounded
	counting []*Counting
	timedOut string
}

// Begin starts an invocation's run of the pass: its budget from now.
func (k *Kit) Begin(ctx context.Context) *Run {
	r := &Run{Budget: NewBudget(ctx, k.Budget, k.Now), kit: k}
	r.Q = r.Querier(0)
	return r
}

// Querier is another of the run's queriers: lockWait, when set, also
// bounds each statement's lock waits (Bounded.LockWait). Its statements
// count with the run's.
func (r *Run) Querier(lockWait time.Duration) *Counting {
	b := &Bounded{DB: r.kit.DB, Deadline: r.End, LockWait: lockWait, Now: r.kit.Now}
	c := &Counting{Q: b}
	r.mu.Lock()
	r.bounded, r.counting = append(r.bounded, b), append(r.counting, c)
	r.mu.Unlock()
	return c
}

// Statements is every statement the run's queriers sent.
func (r *Run) Statements() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var n int64
	for _, c := range r.counting {
		n += c.Count()
	}
	return n
}

// Finishing is the context of the pass's last statements: one the
// invocation's cancellation does not reach (a cancelled invocation still
// records its state and gives its lease back), and the queriers now
// bounded by the hard end.
func (r *Run) Finishing(ctx context.Context) context.Context {
	r.mu.Lock()
	for _, b := range r.bounded {
		b.Deadline = r.HardEnd
	}
	r.mu.Unlock()
	return context.WithoutCancel(ctx)
}

// lastTry is how often a last statement is sent again after a transient
// error, within the finish allowance.
const lastTry = 100 * time.Millisecond

// LastStatement sends one of the pass's last statements, again after a
// transient error (the server restarting, a dropped connection) every
// lastTry while the finish allowance lasts.
func (r *Run) LastStatement(send func() error) error {
	for {
		err := send()
		if err == nil || !Transient(err) || !r.kit.Now().Add(lastTry).Before(r.HardEnd) {
			return err
		}
		time.Sleep(lastTry)
	}
}

// Finish is the one finish rule: the pass's last statements (send) run
// whatever err the work ended with, under Finishing's context, sent again
// after a transient error. The work's error wins; a budget error of
// either becomes TimedOut at Close.
func (r *Run) Finish(ctx context.Context, err error, send func(ctx context.Context) error) error {
	err = r.Absorb(err)
	fctx := r.Finishing(ctx)
	ferr := r.LastStatement(func() error { return send(fctx) })
	if err != nil || ferr == nil {
		return err
	}
	return r.Absorb(ferr)
}

// Absorb turns the budget's end into a normal end: a statement never sent
// for want of time ends the pass as it stood, and one the budget cut off
// is named in TimedOut (the first one).
func (r *Run) Absorb(err error) error {
	switch {
	case errors.Is(err, ErrNotSent):
		return nil
	case errors.Is(err, ErrBudget):
		if r.timedOut == "" {
			r.timedOut = err.Error()
		}
		return nil
	}
	return err
}

// Close ends the run: sum gets the statements, the duration and the
// statement the budget ended; an error gets the pass's name, once
// ("<pass>: <what it was doing>: <cause>").
func (r *Run) Close(sum *Summary, err error) error {
	err = r.Absorb(err)
	if sum.TimedOut == "" {
		sum.TimedOut = r.timedOut
	}
	sum.Statements = r.Statements()
	sum.DurationMS = r.Elapsed().Milliseconds()
	if err != nil {
		err = fmt.Errorf("%s: %w", r.kit.Name, err)
		sum.Error = err.Error()
	}
	return err
}

// Unlimited as RetryPolicy.Attempts retries while the budget lasts.
const Unlimited = int(^uint(0) >> 1)

// RetryPolicy is how Run.Retry retries a transient error.
type RetryPolicy struct {
	// Every is the pause before each retry.
	Every time.Duration
	// Attempts is how many retries follow the first try (Unlimited: as
	// many as the budget allows).
	Attempts int
	// OnRetry, when set, hears each error about to be retried.
	OnRetry func(err error)
}

// Retry runs fn until it succeeds, fails for good (any error not
// Transient, or ctx ending), or the attempts or the budget run out: a
// retry starts only when its pause ends inside the budget. The statements
// fn sends must be safe to repeat; each retry is counted in Retries.
func (r *Run) Retry(ctx context.Context, p RetryPolicy, fn func(ctx context.Context) error) error {
	for attempt := 0; ; attempt++ {
		err := fn(ctx)
		if err == nil || !Transient(err) || ctx.Err() != nil || attempt >= p.Attempts {
			return err
		}
		if !r.Pause(ctx, p.Every) {
			return err
		}
		r.Retries++
		if p.OnRetry != nil {
			p.OnRetry(err)
		}
	}
}

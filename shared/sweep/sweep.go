// Package sweep is the delivery sweeper: the serverless form of cloacina's
// DeliverySweeper. One bounded pass, run by an EventBridge schedule, finds
// deliveries pushed but never acknowledged and puts them back to pending
// (or dead after too many tries), then wakes the relay. docs/design.md
// ("The sweep pass") is its contract.
//
// Two things differ from the reference on purpose:
//   - stuck time is measured from delivered_at, not created_at: a row
//     created an hour ago and pushed a second ago is not stuck;
//   - resets are set-based: one statement per batch of BatchLimit rows, not
//     a list query plus one compare-and-set round trip per row.
//
// The pass holds no transaction open between statements and uses no session
// state (no advisory lock, no SET, no LISTEN): every statement commits on its
// own, so it runs unchanged through RDS Proxy, and a pass cut off anywhere
// leaves every row either moved or untouched.
package sweep

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/budget"
	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// Defaults of Config, as the configuration table of docs/design.md lists
// them.
const (
	DefaultStuckAfter      = 60 * time.Second
	DefaultBatchLimit      = 1000
	DefaultMaxRedeliveries = 10
	DefaultPassBudget      = 20 * time.Second
)

// NeverDead as Config.MaxRedeliveries resets a stuck row however often it
// comes back, and never marks it dead.
const NeverDead = -1

// Config tunes the sweep pass. A zero field means its default, applied by
// New, so Config{} is the documented default configuration.
type Config struct {
	// Schema holds the outbox tables (OUTBOX_SCHEMA). Default "outbox".
	Schema string `env:"OUTBOX_SCHEMA"`
	// StuckAfter is how long a delivery may stay delivered without an ack,
	// measured from delivered_at on the database clock (SWEEP_STUCK_AFTER,
	// default 60s).
	StuckAfter time.Duration `env:"SWEEP_STUCK_AFTER"`
	// BatchLimit caps the rows one reset statement touches
	// (SWEEP_BATCH_LIMIT, default 1000).
	BatchLimit int `env:"SWEEP_BATCH_LIMIT"`
	// MaxRedeliveries is how many resets a row gets before a stuck push
	// makes it dead (SWEEP_MAX_REDELIVERIES, default 10; NeverDead for
	// never).
	MaxRedeliveries int `env:"SWEEP_MAX_REDELIVERIES"`
	// PassBudget bounds one pass (SWEEP_PASS_BUDGET, default 20s); the
	// Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration `env:"SWEEP_PASS_BUDGET"`
}

// WithDefaults fills in every zero field.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, store.DefaultSchema)
	c.StuckAfter = cmp.Or(c.StuckAfter, DefaultStuckAfter)
	c.BatchLimit = cmp.Or(c.BatchLimit, DefaultBatchLimit)
	c.MaxRedeliveries = cmp.Or(c.MaxRedeliveries, DefaultMaxRedeliveries)
	c.PassBudget = cmp.Or(c.PassBudget, DefaultPassBudget)
	return c
}

// Validate is the one check of a Config, on its defaults; its errors (a
// *setting.Error) name the field, which shared/config turns into the
// variable's name.
func (c Config) Validate() error {
	c = c.WithDefaults()
	v := setting.Checker{Pass: "sweep"}
	_, err := store.ParseSchema(c.Schema)
	v.Check(err == nil, "Schema", c.Schema, "must be a plain lower-case identifier, not pg_*")
	v.Check(c.StuckAfter >= time.Second, "StuckAfter", c.StuckAfter, "must be at least 1s")
	v.Check(c.BatchLimit >= 1 && c.BatchLimit <= 100_000, "BatchLimit", c.BatchLimit, "must be between 1 and 100000")
	v.Check(c.MaxRedeliveries == NeverDead || c.MaxRedeliveries >= 1 && c.MaxRedeliveries <= 1_000_000,
		"MaxRedeliveries", c.MaxRedeliveries, "must be between 0 (never dead) and 1000000")
	v.Check(c.PassBudget >= 100*time.Millisecond && c.PassBudget <= setting.MaxPassBudget, "PassBudget", c.PassBudget, "must be between 100ms and 15m (Lambda's longest timeout)")
	return v.Err()
}

// maxRedeliveries is the reset statement's limit: 0 there means never.
func (c Config) maxRedeliveries() int { return max(c.MaxRedeliveries, 0) }

// Options are the injectable parts of a Service.
type Options struct {
	// Now is the pass's clock, for the budget and duration_ms only. Stuck
	// thresholds use the database clock. Default time.Now.
	Now func() time.Time
	// Logger receives the one line per pass; slog.Default() by default.
	Logger *slog.Logger
	// Metrics receives the EMF line per pass; metrics.New("sweep") by default.
	Metrics *metrics.Emitter
}

// Service runs sweep passes. It is safe for concurrent use, and several
// Services (several Lambda environments) may run at once: each row is moved
// by exactly one of them.
type Service struct {
	db         store.DB
	cfg        Config
	opts       Options
	deliveries *store.DeliverySweep
	state      stateSQL
}

// New applies the defaults, validates cfg and returns a Service that runs
// its statements on db (a pool; each statement is its own transaction).
func New(db store.DB, cfg Config, opts Options) (*Service, error) {
	if db == nil {
		return nil, &setting.Error{Pass: "sweep", Field: "db", Value: nil, Reason: "must not be nil"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.Metrics = cmp.Or(opts.Metrics, metrics.New("sweep"))
	schema := store.MustSchema(cfg.Schema)
	return &Service{db: db, cfg: cfg, opts: opts, deliveries: store.NewDeliverySweep(schema), state: newStateSQL(schema)}, nil
}

// finishAllowance is how long after the budget's end the wake and the pass
// record may take; budget.Margin keeps 2s before Lambda's deadline for
// them, the log line and the metrics.
const finishAllowance = time.Second

// RunOnce is one pass:
//  1. count open work (one statement);
//  2. reset stuck rows, one statement per batch, until a batch says none
//     are left or the budget is spent;
//  3. wake the relay once if any stuck work was found;
//  4. record the pass in sweep_state (one statement).
//
// Every statement is bounded by the pass's deadline (store.Bounded): one
// blocked on a lock another session holds ends the pass on its budget with
// a normal result that names it in TimedOut. Any other failure is returned
// with what was done so far. Every batch is one autocommitted statement,
// so a failure or a cancelled context never leaves a batch half applied:
// its rows stay delivered for the next pass.
func (s *Service) RunOnce(ctx context.Context) (*Result, error) {
	start := s.opts.Now()
	limit := budget.For(ctx, s.cfg.PassBudget, start)
	bounded := &store.Bounded{DB: s.db, Deadline: start.Add(limit), Now: s.opts.Now}
	q := &store.Counting{Q: bounded}
	res := &Result{}
	err := s.pass(ctx, q, bounded, start, limit, res)
	if errors.Is(err, store.ErrBudget) {
		res.TimedOut, err = err.Error(), nil
	}
	res.Statements = q.Count()
	res.DurationMS = s.opts.Now().Sub(start).Milliseconds()
	if err != nil {
		res.Error = err.Error()
	}
	return res, err
}

func (s *Service) pass(ctx context.Context, q store.Querier, bounded *store.Bounded, start time.Time, limit time.Duration, res *Result) error {
	counts, err := s.deliveries.CountOpen(ctx, q, s.cfg.StuckAfter)
	if err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	res.StuckPending, res.Open, res.OldestOpenAgeS, res.counted = counts.StuckPending, counts.Open, counts.OldestOpenAge, true

	for {
		if !budgetLeft(s.opts.Now().Sub(start), limit) {
			// Stopped by the budget, not by running out of rows.
			res.More = true
			break
		}
		b, err := s.deliveries.ResetStuck(ctx, q, store.ResetParams{StuckAfter: s.cfg.StuckAfter, Limit: s.cfg.BatchLimit, MaxRedeliveries: s.cfg.maxRedeliveries()})
		if err != nil {
			return fmt.Errorf("sweep: batch %d: %w", res.Batches+1, err)
		}
		res.Batches++
		res.Reset += b.Reset
		res.Dead += b.Dead
		if !b.More {
			break
		}
	}

	// The last two statements may run a moment past the budget.
	bounded.Deadline = start.Add(limit + finishAllowance)
	if shouldWake(res.Reset, res.Dead, res.StuckPending) {
		if err := s.deliveries.Wake(ctx, q, res.Reset, res.StuckPending); err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		res.Woken = true
	}
	if err := s.state.record(ctx, q, res); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	return nil
}

// budgetLeft says whether another batch may start. The first batch runs
// whenever the budget is not already zero (a Lambda invoked within 2s of
// its deadline does nothing but count).
func budgetLeft(elapsed, limit time.Duration) bool {
	return elapsed < limit
}

// shouldWake: one notification per pass, and only when the relay has
// something to do — rows this pass reset, or pending rows it left waiting.
// Dead rows count too: they are stuck work the operator's listeners may
// want to see, and the relay's drain is cheap. A pass that found nothing
// stays silent, so an idle system sends no notifications.
func shouldWake(reset, dead, stuckPending int64) bool {
	return reset+dead+stuckPending > 0
}

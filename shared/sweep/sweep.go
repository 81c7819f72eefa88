// Package sweep is the delivery sweeper (DESIGN §6): the serverless form of
// cloacina's DeliverySweeper. One bounded pass, run by an EventBridge
// schedule, finds deliveries pushed but never acknowledged and puts them back
// to pending (or dead after too many tries), then wakes the relay.
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
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/budget"
	"github.com/outboxkeeper/outboxkeeper/shared/config"
	"github.com/outboxkeeper/outboxkeeper/shared/store"
)

// Config is a sweep's configuration: the SWEEP_* settings (see config.Sweep
// for each field's meaning and default) plus what the pass runs against.
type Config struct {
	config.Sweep
	// Schema holds the outbox tables (OUTBOX_SCHEMA); default "outbox".
	Schema string
	// Now is the pass's clock, for the budget and duration_ms only. Stuck
	// thresholds use the database clock. Default time.Now.
	Now func() time.Time
}

// DefaultConfig is DESIGN §7's defaults.
func DefaultConfig() Config {
	return Config{Sweep: config.Sweep{
		StuckAfter:      config.DefaultSweepStuckAfter,
		BatchLimit:      config.DefaultSweepBatchLimit,
		MaxRedeliveries: config.DefaultSweepMaxRedeliveries,
		PassBudget:      config.DefaultSweepPassBudget,
	}, Schema: config.DefaultSchema}
}

// validate reports the first unusable setting. The environment loader
// already bounds these; this guards callers that build a Config by hand.
func (c Config) validate() error {
	switch {
	case c.StuckAfter < 0:
		return fmt.Errorf("sweep: StuckAfter %s is negative", c.StuckAfter)
	case c.BatchLimit < 1:
		return fmt.Errorf("sweep: BatchLimit %d must be at least 1", c.BatchLimit)
	case c.MaxRedeliveries < 0:
		return fmt.Errorf("sweep: MaxRedeliveries %d is negative (0 means never)", c.MaxRedeliveries)
	case c.PassBudget <= 0:
		return fmt.Errorf("sweep: PassBudget %s must be positive", c.PassBudget)
	}
	return nil
}

// Result is what one pass did; it is also the Lambda response.
type Result struct {
	// Reset is how many delivered rows went back to pending.
	Reset int64 `json:"reset"`
	// Dead is how many stuck rows had used up their redeliveries.
	Dead int64 `json:"dead"`
	// StuckPending counts pending rows created longer than StuckAfter ago,
	// as found at the start of the pass (so rows this pass reset are not
	// counted twice). They are not changed; the wake is for them.
	StuckPending int64 `json:"stuck_pending"`
	// Open and OldestOpenAgeS describe the pending and delivered rows at
	// the start of the pass: how many, and the age in seconds of the
	// oldest by created_at (0 when none).
	Open           int64   `json:"open"`
	OldestOpenAgeS float64 `json:"oldest_open_age_s"`
	// Woken says the relay was notified (any stuck work found).
	Woken bool `json:"woken"`
	// Batches is the number of reset statements sent.
	Batches int `json:"batches"`
	// More says the pass ended on its budget with stuck rows left; the next
	// pass continues.
	More bool `json:"more"`
	// Statements is every statement the pass sent.
	Statements int64 `json:"statements"`
	// DurationMs is the pass's wall time.
	DurationMs int64 `json:"duration_ms"`

	counted bool // Open/OldestOpenAgeS were read (metrics skip them if not)
}

// Sweeper runs sweep passes. It is safe for concurrent use, and several
// Sweepers (several Lambda environments) may run at once: each row is moved
// by exactly one of them.
type Sweeper struct {
	db         store.Querier
	cfg        Config
	deliveries *store.DeliverySweep
	state      *stateSQL
}

// New validates cfg and returns a Sweeper that runs its statements on db
// (a pool; each statement is its own transaction).
func New(db store.Querier, cfg Config) (*Sweeper, error) {
	if db == nil {
		return nil, errors.New("sweep: nil database")
	}
	if cfg.Schema == "" {
		cfg.Schema = config.DefaultSchema
	}
	schema, err := store.ParseSchema(cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("sweep: %w", err)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Sweeper{db: db, cfg: cfg, deliveries: store.NewDeliverySweep(schema), state: newStateSQL(schema)}, nil
}

// RunOnce is one pass:
//  1. count open work (one statement);
//  2. reset stuck rows, one statement per batch, until a batch says none
//     are left or the budget is spent;
//  3. wake the relay once if any stuck work was found;
//  4. record the pass in sweep_state (one statement).
//
// On error it returns what was done so far with the error. Every batch is
// one autocommitted statement, so a failure or a cancelled context never
// leaves a batch half applied: its rows stay delivered for the next pass.
func (s *Sweeper) RunOnce(ctx context.Context) (Result, error) {
	start := s.cfg.Now()
	limit := budget.For(ctx, s.cfg.PassBudget, start)
	q := &store.Counting{Q: s.db}
	var res Result
	finish := func(err error) (Result, error) {
		res.Statements = q.Count()
		res.DurationMs = s.cfg.Now().Sub(start).Milliseconds()
		return res, err
	}

	counts, err := s.deliveries.CountOpen(ctx, q, s.cfg.StuckAfter)
	if err != nil {
		return finish(fmt.Errorf("sweep: %w", err))
	}
	res.StuckPending, res.Open, res.OldestOpenAgeS, res.counted = counts.StuckPending, counts.Open, counts.OldestOpenAge, true

	for {
		if !budgetLeft(s.cfg.Now().Sub(start), limit) {
			// Stopped by the budget, not by running out of rows.
			res.More = true
			break
		}
		b, err := s.deliveries.ResetStuck(ctx, q, s.cfg.StuckAfter, s.cfg.BatchLimit, s.cfg.MaxRedeliveries)
		if err != nil {
			return finish(fmt.Errorf("sweep: batch %d: %w", res.Batches+1, err))
		}
		res.Batches++
		res.Reset += b.Reset
		res.Dead += b.Dead
		if !b.More {
			break
		}
	}

	if shouldWake(res.Reset, res.Dead, res.StuckPending) {
		if err := s.deliveries.Wake(ctx, q, res.Reset, res.StuckPending); err != nil {
			return finish(fmt.Errorf("sweep: %w", err))
		}
		res.Woken = true
	}
	if err := s.state.record(ctx, q, res); err != nil {
		return finish(fmt.Errorf("sweep: %w", err))
	}
	return finish(nil)
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

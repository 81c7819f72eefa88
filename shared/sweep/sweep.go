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
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Defaults of Config, as the configuration table of docs/design.md lists
// them.
const (
	DefaultStuckAfter      = 60 * time.Second
	DefaultBatchLimit      = 1000
	DefaultMaxRedeliveries = 10
	DefaultPassBudget      = 20 * time.Second
)

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
	// makes it dead (SWEEP_MAX_REDELIVERIES, default 10; pass.Off for
	// never).
	MaxRedeliveries int `env:"SWEEP_MAX_REDELIVERIES"`
	// PassBudget bounds one pass (SWEEP_PASS_BUDGET, default 20s); the
	// Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration `env:"SWEEP_PASS_BUDGET"`
}

// bounds is every numeric field's default and accepted values, once.
var bounds = []pass.Bound{
	pass.Dur("StuckAfter", "SWEEP_STUCK_AFTER", DefaultStuckAfter, pass.AtLeast(time.Second)),
	pass.Int("BatchLimit", "SWEEP_BATCH_LIMIT", DefaultBatchLimit, pass.Ints(1, 100_000)),
	pass.Int("MaxRedeliveries", "SWEEP_MAX_REDELIVERIES", DefaultMaxRedeliveries, pass.Ints(1, 1_000_000)).OrOff("never dead"),
	pass.PassBudget("SWEEP_PASS_BUDGET", DefaultPassBudget),
}

// Bounds, WithDefaults and Validate are the Config's one table of
// defaults and accepted values, applied by the kit: a zero field means its
// default, and Validate's error (a *setting.Error) names the field, which
// shared/config turns into the variable's name.
func (Config) Bounds() []pass.Bound   { return bounds }
func (c Config) WithDefaults() Config { return pass.WithDefaults(c, bounds) }
func (c Config) Validate() error      { return pass.Validate("sweep", c, bounds) }

// maxRedeliveries is the reset statement's limit: 0 there means never.
func (c Config) maxRedeliveries() int { return max(c.MaxRedeliveries, 0) }

// Options are the injectable parts of a Service. Now is the pass's clock,
// for the budget and duration_ms only: stuck thresholds use the database
// clock.
type Options struct {
	pass.Options
}

// Service runs sweep passes. It is safe for concurrent use, and several
// Services (several Lambda environments) may run at once: each row is moved
// by exactly one of them.
type Service struct {
	// Handler's Handle is the Lambda handler: one pass, one JSON log line,
	// one EMF line, and the Result as the response; the input (a scheduled
	// event, a Scheduler Input, `{}`) means "sweep now".
	*pass.Handler[json.RawMessage, *Result, *Result]
	kit        *pass.Kit
	cfg        Config
	deliveries *store.DeliverySweep
	consumers  *store.ConsumerOps
	state      pass.StateTable
}

// New applies the defaults, validates cfg and returns a Service that runs
// its statements on db (a pool; each statement is its own transaction).
func New(db pass.DB, cfg Config, opts Options) (*Service, error) {
	kit, cfg, err := pass.Configure("sweep", db, cfg, opts.Options)
	if err != nil {
		return nil, err
	}
	s := &Service{kit: kit, cfg: cfg, deliveries: store.NewDeliverySweep(store.MustSchema(cfg.Schema)),
		consumers: store.NewConsumerOps(store.MustSchema(cfg.Schema)),
		state:     stateFile.In(cfg.Schema)}
	s.Handler = pass.Scheduled("sweep", &kit.Options, s.RunOnce)
	return s, nil
}

// RunOnce is one pass; the input says nothing the pass needs:
//  1. count open work (one statement);
//  2. reset stuck rows, one statement per batch, until a batch says none
//     are left or the budget is spent;
//  3. wake the relay once if any stuck work was found;
//  4. record the pass in sweep_state (one statement).
//
// Every statement is bounded by the pass's deadline: one blocked on a lock
// another session holds ends the pass on its budget with a normal result
// that names it in TimedOut. The wake and the record are the pass's last
// statements, sent on every way out (pass.Run.Finish). Any other failure
// is returned with what was done so far. Every batch is one autocommitted
// statement, so a failure or a cancelled context never leaves a batch half
// applied: its rows stay delivered for the next pass.
func (s *Service) RunOnce(ctx context.Context, _ json.RawMessage) (*Result, error) {
	run := s.kit.Begin(ctx)
	res := &Result{}
	err := s.reset(ctx, run, res)
	err = run.Finish(ctx, err, func(ctx context.Context) error { return s.finish(ctx, run, res) })
	return res, run.Close(&res.Summary, err)
}

// reset counts the open work and resets stuck rows, a batch a statement.
func (s *Service) reset(ctx context.Context, run *pass.Run, res *Result) error {
	counts, err := s.deliveries.CountOpen(ctx, run.Q, s.cfg.StuckAfter)
	if err != nil {
		return err
	}
	res.StuckPending, res.Open, res.OldestOpenAgeS, res.counted = counts.StuckPending, counts.Open, counts.OldestOpenAge, true
	// The consumers' figures ride on this pass because it runs every
	// minute and is not the fill's critical path: ConsumerLag and the
	// ConsumerHoldsRetention alarm's ConsumerHeldSeconds.
	cs, err := s.consumers.Summary(ctx, run.Q)
	if err != nil {
		return err
	}
	res.ConsumerLag, res.ConsumersHolding, res.ConsumerHeldS, res.consumersRead = cs.MaxLag, cs.Holding, cs.HeldSeconds, true
	// The first batch runs whenever the budget is not already zero (a
	// Lambda invoked within 2s of its deadline does nothing but count).
	for run.TimeLeft() {
		b, err := s.deliveries.ResetStuck(ctx, run.Q, store.ResetParams{StuckAfter: s.cfg.StuckAfter, Limit: s.cfg.BatchLimit, MaxRedeliveries: s.cfg.maxRedeliveries()})
		if err != nil {
			return fmt.Errorf("batch %d: %w", res.Batches+1, err)
		}
		res.Batches++
		res.Reset += b.Reset
		res.Dead += b.Dead
		if !b.More {
			return nil
		}
	}
	// Stopped by the budget, not by running out of rows.
	res.More = true
	return nil
}

// finish wakes the relay (once) if the pass found stuck work, and records
// the pass.
func (s *Service) finish(ctx context.Context, run *pass.Run, res *Result) error {
	if shouldWake(res.Reset, res.Dead, res.StuckPending) && !res.Woken {
		if err := s.deliveries.Wake(ctx, run.Q, res.Reset, res.StuckPending); err != nil {
			return err
		}
		res.Woken = true
	}
	return s.state.Record(ctx, run.Q, pgx.NamedArgs{"reset": res.Reset, "dead": res.Dead, "stuck_pending": res.StuckPending})
}

// shouldWake: one notification per pass, and only when the relay has
// something to do — rows this pass reset, or pending rows it left waiting.
// Dead rows count too: they are stuck work the operator's listeners may
// want to see, and the relay's drain is cheap. A pass that found nothing
// stays silent, so an idle system sends no notifications.
func shouldWake(reset, dead, stuckPending int64) bool {
	return reset+dead+stuckPending > 0
}

//go:embed sweep_state.sql
var stateSQL embed.FS

// stateFile is sweep_state's two statements, record and read.
var stateFile = pass.MustParseStateFile(stateSQL, "sweep_state.sql")

// State is sweep_state as an operator sees it (outboxkeeper status).
type State struct {
	pass.Recorded
	LastReset        int64 `json:"last_reset"`
	LastDead         int64 `json:"last_dead"`
	LastStuckPending int64 `json:"last_stuck_pending"`
	ResetsTotal      int64 `json:"resets_total"`
	DeadTotal        int64 `json:"dead_total"`
}

// ReadState reads the one row of sweep_state (the zero State when an
// operator deleted it: the next pass recreates it).
func ReadState(ctx context.Context, q store.Querier, schema store.Schema) (State, error) {
	var s State
	if err := stateFile.In(schema.Name()).ReadRecorded(ctx, q, &s.Recorded, &s.LastReset, &s.LastDead, &s.LastStuckPending, &s.ResetsTotal, &s.DeadTotal); err != nil {
		return State{}, err
	}
	return s, nil
}

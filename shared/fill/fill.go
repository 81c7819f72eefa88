// Package fill is the fill function's logic: one bounded pass that finds
// sequence gaps left by rolled-back or crashed writers, proves each gap
// abandoned, and writes placeholder rows so ordered consumers never stall.
// docs/design.md ("Why a placeholder is safe", "The fill pass") is the
// contract; the rules it numbers §3.1-§3.7 are cited here by number.
//
// It is the serverless form of obix's resident gap filler: the state that
// task kept in memory (the stall and its marker, the cursor) lives in
// <schema>.fill_state between invocations, a lease row stands in for "one
// task per process", and a pass that has caught up keeps watching until
// its budget ends, handing the lease to the next scheduled invocation, so
// a gap is closed within seconds whatever the schedule's period.
// Every statement is autocommit and bounded by the pass's deadline: the
// pass never holds a transaction (or a snapshot that would pin the very
// horizon it waits on) while it waits.
package fill

import (
	"encoding/json"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Defaults of Config, as the configuration table of docs/design.md lists
// them.
const (
	DefaultGrace      = 250 * time.Millisecond
	DefaultBatchLimit = 1000
	DefaultPageSize   = 1000
	DefaultPassBudget = 20 * time.Second
	DefaultTick       = 250 * time.Millisecond
)

// MaxBlockers caps blocked_by.
const MaxBlockers = 5

// Config tunes the fill pass. A zero field means its default, applied by
// New, so Config{} is the documented default configuration.
type Config struct {
	// Schema holds the outbox tables (OUTBOX_SCHEMA). Default "outbox".
	Schema string `env:"OUTBOX_SCHEMA"`
	// Grace is how long a stall must last before its gap may be filled
	// (FILL_GRACE, default 250ms): a grace saves the marker a stall that
	// resolves inside it would have cost, at the price of that much
	// latency on every gap; the proof alone is what makes a placeholder
	// safe. pass.Off for none.
	Grace time.Duration `env:"FILL_GRACE"`
	// BatchLimit caps the placeholders one insert statement writes
	// (FILL_BATCH_LIMIT, default 1000), keeping each statement short; a
	// cycle runs as many inserts as it needs.
	BatchLimit int `env:"FILL_BATCH_LIMIT"`
	// PageSize is how many present rows one page read of a tick returns
	// (FILL_PAGE_SIZE, default 1000); a fill cycle reads ten pages, at
	// most 100,000 rows, per statement.
	PageSize int `env:"FILL_PAGE_SIZE"`
	// PassBudget bounds one pass (FILL_PASS_BUDGET, default 20s); the
	// Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration `env:"FILL_PASS_BUDGET"`
	// Bounded ends a pass as soon as it has caught up (FILL_WATCH=false).
	// By default a pass keeps watching until its budget ends, and a
	// watching pass that finds the lease held waits to be handed it.
	Bounded bool `env:"FILL_WATCH,not"`
	// Tick is how often a watching pass looks at the head, and how often
	// any pass polls a proof or waits for a lease (FILL_TICK, default
	// 250ms).
	Tick time.Duration `env:"FILL_TICK"`
}

// bounds is every numeric field's default and accepted values, once.
var bounds = []pass.Bound{
	pass.Dur("Grace", "FILL_GRACE", DefaultGrace, pass.AtLeast(0)).OrOff("no grace"),
	pass.Int("BatchLimit", "FILL_BATCH_LIMIT", DefaultBatchLimit, pass.Ints(1, 100_000)),
	pass.Int("PageSize", "FILL_PAGE_SIZE", DefaultPageSize, pass.Ints(1, 100_000)),
	pass.PassBudget("FILL_PASS_BUDGET", DefaultPassBudget),
	pass.Dur("Tick", "FILL_TICK", DefaultTick, pass.Durations(10*time.Millisecond, time.Minute)),
}

// Bounds, WithDefaults and Validate are the Config's one table of
// defaults and accepted values, applied by the kit: a zero field means its
// default, and Validate's error (a *setting.Error) names the field, which
// shared/config turns into the variable's name.
func (Config) Bounds() []pass.Bound   { return bounds }
func (c Config) WithDefaults() Config { return pass.WithDefaults(c, bounds) }
func (c Config) Validate() error      { return pass.Validate("fill", c, bounds) }

// Options are the injectable parts of a Service.
type Options struct {
	pass.Options
	// LeaseTTL overrides the lease period (pass.LeaseTicks ticks, at least
	// pass.MinLeaseTTL).
	LeaseTTL time.Duration
}

// Service runs fill passes against one outbox schema.
type Service struct {
	// Handler's Handle is the Lambda handler: one pass, one JSON log line,
	// one EMF line, and the Result as the response; the input (a Scheduler
	// Input, a scheduled-event envelope, `{}`) says nothing the pass
	// needs. A database that failed for the whole budget is an error, so
	// Lambda counts it; waiting, and a statement the budget ended, are not.
	*pass.Handler[json.RawMessage, *Result, *Result]
	kit    *pass.Kit
	cfg    Config
	events *store.Events
	lease  *pass.Lease
	state  stateSQL
	proof  proofSQL
	skips  *store.Skips

	// afterHeadRead runs between the head read and the marker assignment
	// (§3.2); beforeInsert between a cycle's page read and its insert.
	// Tests use them to act exactly there.
	afterHeadRead func(head int64)
	beforeInsert  func(seqs []int64)
}

// New applies the defaults, validates cfg and builds a Service. db is
// normally the function's pool: every statement is its own transaction, so
// consecutive statements may use different connections, and a dropped
// connection is re-dialled.
func New(db pass.DB, cfg Config, opts Options) (*Service, error) {
	kit, cfg, err := pass.Configure("fill", db, cfg, opts.Options)
	if err != nil {
		return nil, err
	}
	schema := store.MustSchema(cfg.Schema)
	lease := pass.NewLease(pass.LeaseSpec{Schema: cfg.Schema, Name: LeaseName, Probe: "{{schema}}.allocation_head()",
		Tick: cfg.Tick, TTL: opts.LeaseTTL})
	s := &Service{
		kit:    kit,
		cfg:    cfg,
		events: store.NewEvents(schema),
		lease:  lease,
		state:  newStateSQL(lease, cfg.Schema),
		proof:  newProofSQL(),
		skips:  store.NewSkips(schema),
	}
	s.Handler = pass.Scheduled("fill", &kit.Options, s.RunOnce)
	return s, nil
}

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
	"cmp"
	"log/slog"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	kit "github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Defaults of Config, as the configuration table of docs/design.md lists
// them.
const (
	DefaultGrace      = 2 * time.Second
	DefaultBatchLimit = 1000
	DefaultPageSize   = 1000
	DefaultPassBudget = 20 * time.Second
	DefaultTick       = 500 * time.Millisecond
)

// NoGrace as Config.Grace fills a stall as soon as its proof passes.
const NoGrace time.Duration = -1

// MaxBlockers caps blocked_by.
const MaxBlockers = 5

// Config tunes the fill pass. A zero field means its default, applied by
// New, so Config{} is the documented default configuration.
type Config struct {
	// Schema holds the outbox tables (OUTBOX_SCHEMA). Default "outbox".
	Schema string `env:"OUTBOX_SCHEMA"`
	// Grace is how long a stall must last before its gap may be filled
	// (FILL_GRACE, default 2s): most stalls are a writer that commits a
	// moment late, and those must cost no writes. NoGrace for none.
	Grace time.Duration `env:"FILL_GRACE"`
	// BatchLimit caps the placeholders one insert statement writes
	// (FILL_BATCH_LIMIT, default 1000), keeping each statement short; a
	// cycle runs as many inserts as it needs.
	BatchLimit int `env:"FILL_BATCH_LIMIT"`
	// PageSize is how many present rows one page read returns
	// (FILL_PAGE_SIZE, default 1000).
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
	// 500ms).
	Tick time.Duration `env:"FILL_TICK"`
}

// WithDefaults fills in every zero field.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, store.DefaultSchema)
	c.Grace = cmp.Or(c.Grace, DefaultGrace)
	c.BatchLimit = cmp.Or(c.BatchLimit, DefaultBatchLimit)
	c.PageSize = cmp.Or(c.PageSize, DefaultPageSize)
	c.PassBudget = cmp.Or(c.PassBudget, DefaultPassBudget)
	c.Tick = cmp.Or(c.Tick, DefaultTick)
	return c
}

// Validate is the one check of a Config, on its defaults; its errors (a
// *setting.Error) name the field, which shared/config turns into the
// variable's name.
func (c Config) Validate() error {
	c = c.WithDefaults()
	v := setting.Checker{Pass: "fill"}
	_, err := store.ParseSchema(c.Schema)
	v.Check(err == nil, "Schema", c.Schema, "must be a plain lower-case identifier, not pg_*")
	v.Check(c.Grace >= 0 || c.Grace == NoGrace, "Grace", c.Grace, "must be at least 0")
	v.Check(c.BatchLimit >= 1 && c.BatchLimit <= 100_000, "BatchLimit", c.BatchLimit, "must be between 1 and 100000")
	v.Check(c.PageSize >= 1 && c.PageSize <= 100_000, "PageSize", c.PageSize, "must be between 1 and 100000")
	v.Check(c.PassBudget >= 100*time.Millisecond && c.PassBudget <= setting.MaxPassBudget, "PassBudget", c.PassBudget, "must be between 100ms and 15m (Lambda's longest timeout)")
	v.Check(c.Tick >= 10*time.Millisecond && c.Tick <= time.Minute, "Tick", c.Tick, "must be between 10ms and 1m")
	return v.Err()
}

// The lease outlives its last renewal by LeaseTicks ticks (2s at the
// default tick), and never by less than MinLeaseTTL, which a slow
// statement on a loaded server may take. A holder renews it every third
// of that while it works (at the default tick, every other tick), so only
// a pass that crashed, or one stuck in a statement that long, lets it run
// out; the next pass then takes over a few ticks later.
const (
	LeaseTicks  = 4
	MinLeaseTTL = time.Second
)

// leaseTTL is the lease period for a tick.
func leaseTTL(tick time.Duration) time.Duration {
	return max(LeaseTicks*tick, MinLeaseTTL)
}

// Options are the injectable parts of a Service.
type Options struct {
	// Now is the clock for grace and budget decisions; time.Now by default.
	// The lease uses the database clock.
	Now func() time.Time
	// Logger receives the one line per pass; slog.Default() by default.
	Logger *slog.Logger
	// Metrics receives the EMF line per pass; metrics.New("fill") by default.
	Metrics *metrics.Emitter
	// LeaseTTL overrides the lease period (LeaseTicks ticks, at least
	// MinLeaseTTL).
	LeaseTTL time.Duration
}

// Service runs fill passes against one outbox schema.
type Service struct {
	db     kit.DB
	events *store.Events
	state  stateSQL
	lease  leaseSQL
	proof  proofSQL
	skips  *store.Skips
	cfg    Config
	opts   Options

	// afterHeadRead runs between the head read and the marker assignment
	// (§3.2); beforeInsert between a cycle's page read and its insert.
	// Tests use them to act exactly there.
	afterHeadRead func(head int64)
	beforeInsert  func(seqs []int64)
	// onLease runs at the steps of taking the lease (leaseEvent), with
	// the pass's lease token: tests stop a successor exactly there.
	onLease func(ev leaseEvent, owner string)
}

// leaseEvent is a step of a pass taking the lease, for Service.onLease.
type leaseEvent int

const (
	leasePolling    leaseEvent = iota // before a waiting pass polls the lease again
	leaseRegistered                   // a watching pass found the lease held and registered as successor
	leaseTaken                        // the pass took the lease (free, expired, or handed to it)
)

// New applies the defaults, validates cfg and builds a Service. db is
// normally the function's pool: every statement is its own transaction, so
// consecutive statements may use different connections, and a dropped
// connection is re-dialled.
func New(db kit.DB, cfg Config, opts Options) (*Service, error) {
	if db == nil {
		return nil, &setting.Error{Pass: "fill", Field: "db", Value: nil, Reason: "must not be nil"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	schema := store.MustSchema(cfg.Schema)
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.Metrics = cmp.Or(opts.Metrics, metrics.New("fill"))
	opts.LeaseTTL = cmp.Or(opts.LeaseTTL, leaseTTL(cfg.Tick))
	return &Service{
		db:     db,
		events: store.NewEvents(schema),
		state:  newStateSQL(schema),
		lease:  newLeaseSQL(schema),
		proof:  newProofSQL(),
		skips:  store.NewSkips(schema),
		cfg:    cfg,
		opts:   opts,
	}, nil
}

// Package prune is the retention pass (docs/design.md §6b): on its own
// schedule, one bounded pass deletes deliveries acked or dead longer than
// their retention, and events older than theirs — never an event above the
// fill watermark nor one a registered consumer has not passed, so pruning
// never takes an event someone still reads. It is River's job cleaner in
// shape: set-based batches of BatchLimit rows, each one statement and its
// own transaction, as many as the budget allows; the next pass carries on.
//
// The pass holds no transaction open between statements and uses no
// session state: every statement commits on its own behind a
// transaction-local statement_timeout (pass.Bounded), so it runs through
// RDS Proxy and PgBouncer in transaction mode, and a pass cut off anywhere
// leaves every row either deleted or untouched.
package prune

import (
	"cmp"
	"log/slog"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Defaults of Config, as the configuration table of docs/design.md lists
// them. Events are kept forever unless EventsAfter is set.
const (
	DefaultAckedAfter = 24 * time.Hour
	DefaultDeadAfter  = 168 * time.Hour
	DefaultBatchLimit = 5000
	DefaultPassBudget = 20 * time.Second
)

// Keep as a retention deletes nothing of that kind. It is what a variable
// set to 0 becomes (shared/config hands an explicit zero over as -1), and
// what an unset EventsAfter means.
const Keep time.Duration = -1

// Config tunes the prune pass. A zero field means its default, applied by
// New, so Config{} is the documented default configuration.
type Config struct {
	// Schema holds the outbox tables (OUTBOX_SCHEMA). Default "outbox".
	Schema string `env:"OUTBOX_SCHEMA"`
	// AckedAfter is how long an acked delivery is kept, from acked_at
	// (PRUNE_ACKED_AFTER, default 24h; Keep, or 0 in the variable, keeps
	// them forever).
	AckedAfter time.Duration `env:"PRUNE_ACKED_AFTER"`
	// DeadAfter is how long a dead delivery is kept, from dead_at, so an
	// operator has time to look at it and retry it (PRUNE_DEAD_AFTER,
	// default 168h; Keep, or 0, keeps them).
	DeadAfter time.Duration `env:"PRUNE_DEAD_AFTER"`
	// EventsAfter is how long an event (real or placeholder) is kept, from
	// recorded_at (PRUNE_EVENTS_AFTER, default: kept forever). Never an
	// event above the fill watermark or the slowest registered consumer.
	EventsAfter time.Duration `env:"PRUNE_EVENTS_AFTER"`
	// BatchLimit caps the rows one delete statement removes
	// (PRUNE_BATCH_LIMIT, default 5000), keeping each transaction short.
	BatchLimit int `env:"PRUNE_BATCH_LIMIT"`
	// PassBudget bounds one pass (PRUNE_PASS_BUDGET, default 20s); the
	// Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration `env:"PRUNE_PASS_BUDGET"`
}

// WithDefaults fills in every zero field. EventsAfter has no default but
// Keep.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, store.DefaultSchema)
	c.AckedAfter = cmp.Or(c.AckedAfter, DefaultAckedAfter)
	c.DeadAfter = cmp.Or(c.DeadAfter, DefaultDeadAfter)
	c.EventsAfter = cmp.Or(c.EventsAfter, Keep)
	c.BatchLimit = cmp.Or(c.BatchLimit, DefaultBatchLimit)
	c.PassBudget = cmp.Or(c.PassBudget, DefaultPassBudget)
	return c
}

// Validate is the one check of a Config, on its defaults; its errors (a
// *setting.Error) name the field, which shared/config turns into the
// variable's name.
func (c Config) Validate() error {
	c = c.WithDefaults()
	v := setting.Checker{Pass: "prune"}
	_, err := store.ParseSchema(c.Schema)
	v.Check(err == nil, "Schema", c.Schema, "must be a plain lower-case identifier, not pg_*")
	retention := func(d time.Duration) bool { return d == Keep || d >= time.Second }
	v.Check(retention(c.AckedAfter), "AckedAfter", c.AckedAfter, "must be at least 1s, or 0 to keep acked deliveries")
	v.Check(retention(c.DeadAfter), "DeadAfter", c.DeadAfter, "must be at least 1s, or 0 to keep dead deliveries")
	v.Check(retention(c.EventsAfter), "EventsAfter", c.EventsAfter, "must be at least 1s, or 0 to keep events")
	v.Check(c.BatchLimit >= 1 && c.BatchLimit <= 100_000, "BatchLimit", c.BatchLimit, "must be between 1 and 100000")
	v.Check(c.PassBudget >= 100*time.Millisecond && c.PassBudget <= setting.MaxPassBudget, "PassBudget", c.PassBudget, "must be between 100ms and 15m (Lambda's longest timeout)")
	return v.Err()
}

// Options are the injectable parts of a Service.
type Options struct {
	// Now is the pass's clock, for the budget and duration_ms only.
	// Retention cutoffs use the database clock. Default time.Now.
	Now func() time.Time
	// Logger receives the one line per pass; slog.Default() by default.
	Logger *slog.Logger
	// Metrics receives the EMF line per pass; metrics.New("prune") by default.
	Metrics *metrics.Emitter
}

// Service runs prune passes. It is safe for concurrent use, and several
// passes may overlap (a slow pass and the next hour's): each row is
// deleted by exactly one of them, and neither waits for the other.
type Service struct {
	db         pass.DB
	cfg        Config
	opts       Options
	deliveries *store.DeliveryPrune
	events     *store.EventPrune
	state      stateSQL
}

// New applies the defaults, validates cfg and returns a Service that runs
// its statements on db (a pool; each statement is its own transaction).
func New(db pass.DB, cfg Config, opts Options) (*Service, error) {
	if db == nil {
		return nil, &setting.Error{Pass: "prune", Field: "db", Value: nil, Reason: "must not be nil"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.Metrics = cmp.Or(opts.Metrics, metrics.New("prune"))
	schema := store.MustSchema(cfg.Schema)
	return &Service{
		db: db, cfg: cfg, opts: opts,
		deliveries: store.NewDeliveryPrune(schema),
		events:     store.NewEventPrune(schema),
		state:      newStateSQL(schema),
	}, nil
}

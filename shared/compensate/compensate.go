// Package compensate is the logic of functions/compensate: it fills, at
// once and exactly, the sequences that writers report they abandoned, from a
// batch of SQS messages, and says per message which ones SQS should hand out
// again. docs/design.md ("The compensate handler") is its contract.
//
// One batch costs one check statement (allocation head, xid horizon and the
// status of every distinct writer) and one placeholder insert for everything
// fillable, which notifies the range it wrote: never a round trip per
// message or per sequence. A batch runs in four phases, each a method of
// its own: parse (no database), decide (the check), fill (the insert) and
// settle (the SQS side effects and the per-message outcome).
package compensate

import (
	"cmp"
	"log/slog"
	"strings"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// Defaults of Config, as the configuration table of docs/design.md lists
// them.
const (
	DefaultMaxSequences  = report.DefaultMaxSequences
	DefaultDefer         = 2 * time.Second
	DefaultMaxDeferrals  = 3
	DefaultRetryAttempts = 5
	DefaultRetryInterval = 500 * time.Millisecond
	// DefaultPassBudget bounds the database work of one batch; under
	// Lambda the deadline minus 2s bounds it further.
	DefaultPassBudget = 30 * time.Second
)

// None, as Defer, RetryAttempts or RetryInterval, asks for zero of it,
// where a zero field would mean the default.
const None = -1

// Config tunes the compensate handler. A zero field means its default,
// applied by New, so Config{} is the documented default configuration.
type Config struct {
	// Schema holds the outbox tables (OUTBOX_SCHEMA). Default "outbox".
	Schema string `env:"OUTBOX_SCHEMA"`
	// DLQURL receives bad input with an `error` attribute
	// (COMPENSATE_DLQ_URL). Empty: bad input is reported as a failed item
	// and the queue's redrive policy moves it.
	DLQURL string `env:"COMPENSATE_DLQ_URL"`
	// MaxSequences caps the distinct sequences of one report
	// (COMPENSATE_MAX_SEQUENCES, default 10000).
	MaxSequences int `env:"COMPENSATE_MAX_SEQUENCES"`
	// Defer is the visibility given to a report whose writer still runs
	// (COMPENSATE_DEFER, default 2s, whole seconds; None for 0s).
	Defer time.Duration `env:"COMPENSATE_DEFER"`
	// MaxDeferrals is the receive count after which a report whose writer
	// still runs is dropped and left to the fill function
	// (COMPENSATE_MAX_DEFERRALS, default 3).
	MaxDeferrals int `env:"COMPENSATE_MAX_DEFERRALS"`
	// RetryAttempts counts retries of a transient database error after
	// the first try (COMPENSATE_RETRY_ATTEMPTS, default 5; None for none);
	// RetryInterval paces them (COMPENSATE_RETRY_INTERVAL, default 500ms;
	// None for at once).
	RetryAttempts int           `env:"COMPENSATE_RETRY_ATTEMPTS"`
	RetryInterval time.Duration `env:"COMPENSATE_RETRY_INTERVAL"`
	// PassBudget bounds the database work and retries of one batch
	// (default 30s); the Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration
}

// WithDefaults fills in every zero field.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, store.DefaultSchema)
	c.MaxSequences = cmp.Or(c.MaxSequences, DefaultMaxSequences)
	c.Defer = cmp.Or(c.Defer, DefaultDefer)
	c.MaxDeferrals = cmp.Or(c.MaxDeferrals, DefaultMaxDeferrals)
	c.RetryAttempts = cmp.Or(c.RetryAttempts, DefaultRetryAttempts)
	c.RetryInterval = cmp.Or(c.RetryInterval, DefaultRetryInterval)
	c.PassBudget = cmp.Or(c.PassBudget, DefaultPassBudget)
	return c
}

// Validate is the one check of a Config, on its defaults; its errors (a
// *setting.Error) name the field, which shared/config turns into the
// variable's name.
func (c Config) Validate() error {
	c = c.WithDefaults()
	v := setting.Checker{Pass: "compensate"}
	_, err := store.ParseSchema(c.Schema)
	v.Check(err == nil, "Schema", c.Schema, "must be a plain lower-case identifier, not pg_*")
	v.Check(c.DLQURL == "" || strings.HasPrefix(c.DLQURL, "https://") || strings.HasPrefix(c.DLQURL, "http://"),
		"DLQURL", c.DLQURL, "must be an SQS queue URL (https://...)")
	v.Check(c.MaxSequences >= 1 && c.MaxSequences <= 100_000, "MaxSequences", c.MaxSequences, "must be between 1 and 100000")
	// SQS caps a visibility timeout at 12 hours and counts whole seconds.
	v.Check(c.Defer == None || c.Defer > 0 && c.Defer <= 12*time.Hour && c.Defer%time.Second == 0,
		"Defer", c.Defer, "must be whole seconds between 0s and 12h (SQS visibility timeouts)")
	v.Check(c.MaxDeferrals >= 1 && c.MaxDeferrals <= 1000, "MaxDeferrals", c.MaxDeferrals, "must be between 1 and 1000")
	v.Check(c.RetryAttempts == None || c.RetryAttempts >= 1 && c.RetryAttempts <= 100,
		"RetryAttempts", c.RetryAttempts, "must be between 0 and 100")
	v.Check(c.RetryInterval == None || c.RetryInterval > 0, "RetryInterval", c.RetryInterval, "must be at least 0")
	v.Check(c.PassBudget >= 100*time.Millisecond, "PassBudget", c.PassBudget, "must be at least 100ms")
	return v.Err()
}

// The values the batch works with, None read as zero.
func (c Config) deferSeconds() int32          { return int32(max(c.Defer, 0) / time.Second) }
func (c Config) retries() int                 { return max(c.RetryAttempts, 0) }
func (c Config) retryInterval() time.Duration { return max(c.RetryInterval, 0) }

// Options are the injectable parts of a Service.
type Options struct {
	// SQS sends bad input to the DLQ and defers messages (required).
	SQS SQS
	// Logger receives one line per batch (and one per dropped or
	// undeliverable bad message). Default slog.Default().
	Logger *slog.Logger
	// Metrics receives one EMF line per batch. Default metrics.New("compensate").
	Metrics *metrics.Emitter
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Service handles batches of rollback reports. Safe for concurrent use.
type Service struct {
	db       pass.DB
	cfg      Config
	opts     Options
	events   *store.Events
	queues   *queueURLs
	checkSQL string
}

// New applies the defaults, validates cfg and builds a Service. db runs the
// statements: in production the pgx pool, which drops a connection that
// failed and dials a fresh one for the next statement.
func New(db pass.DB, cfg Config, opts Options) (*Service, error) {
	switch {
	case db == nil:
		return nil, &setting.Error{Pass: "compensate", Field: "db", Value: nil, Reason: "must not be nil"}
	case opts.SQS == nil:
		return nil, &setting.Error{Pass: "compensate", Field: "SQS", Value: nil, Reason: "must not be nil"}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	opts.Logger = cmp.Or(opts.Logger, slog.Default())
	opts.Metrics = cmp.Or(opts.Metrics, metrics.New("compensate"))
	if opts.Now == nil {
		opts.Now = time.Now
	}
	schema := store.MustSchema(cfg.Schema)
	return &Service{
		db:       db,
		cfg:      cfg,
		opts:     opts,
		events:   store.NewEvents(schema),
		queues:   &queueURLs{client: opts.SQS},
		checkSQL: checkSQL(schema),
	}, nil
}

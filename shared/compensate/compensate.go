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
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"

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
	// (COMPENSATE_DEFER, default 2s, whole seconds; pass.Off for 0s).
	Defer time.Duration `env:"COMPENSATE_DEFER"`
	// MaxDeferrals is the receive count after which a report whose writer
	// still runs is dropped and left to the fill function
	// (COMPENSATE_MAX_DEFERRALS, default 3).
	MaxDeferrals int `env:"COMPENSATE_MAX_DEFERRALS"`
	// RetryAttempts counts retries of a transient database error after
	// the first try (COMPENSATE_RETRY_ATTEMPTS, default 5; pass.Off for
	// none); RetryInterval paces them (COMPENSATE_RETRY_INTERVAL, default
	// 500ms; pass.Off for at once).
	RetryAttempts int           `env:"COMPENSATE_RETRY_ATTEMPTS"`
	RetryInterval time.Duration `env:"COMPENSATE_RETRY_INTERVAL"`
	// PassBudget bounds the database work and retries of one batch
	// (COMPENSATE_PASS_BUDGET, default 30s); the Lambda deadline minus 2s
	// bounds it further.
	PassBudget time.Duration `env:"COMPENSATE_PASS_BUDGET"`
}

// bounds is every numeric field's default and accepted values, once.
var bounds = []pass.Bound{
	pass.Int("MaxSequences", "COMPENSATE_MAX_SEQUENCES", DefaultMaxSequences, pass.Ints(1, 100_000)),
	// SQS caps a visibility timeout at 12 hours and counts whole seconds.
	pass.Dur("Defer", "COMPENSATE_DEFER", DefaultDefer, pass.Durations(time.Second, 12*time.Hour)).
		InWhole(time.Second).Because("SQS visibility timeouts").OrOff("none"),
	pass.Int("MaxDeferrals", "COMPENSATE_MAX_DEFERRALS", DefaultMaxDeferrals, pass.Ints(1, 1000)),
	pass.Int("RetryAttempts", "COMPENSATE_RETRY_ATTEMPTS", DefaultRetryAttempts, pass.Ints(1, 100)).OrOff("none"),
	pass.Dur("RetryInterval", "COMPENSATE_RETRY_INTERVAL", DefaultRetryInterval, pass.AtLeast(0)).OrOff("at once"),
	pass.PassBudget("COMPENSATE_PASS_BUDGET", DefaultPassBudget),
}

// Bounds and WithDefaults are the Config's one table of defaults and
// accepted values, applied by the kit: a zero field means its default.
func (Config) Bounds() []pass.Bound   { return bounds }
func (c Config) WithDefaults() Config { return pass.WithDefaults(c, bounds) }

// Validate is the one check of a Config, on its defaults: the bounds, then
// the DLQ's URL. Its error (a *setting.Error) names the field, which
// shared/config turns into the variable's name.
func (c Config) Validate() error {
	if err := pass.Validate("compensate", c, bounds); err != nil {
		return err
	}
	v := setting.Checker{Pass: "compensate"}
	v.Check(c.DLQURL == "" || strings.HasPrefix(c.DLQURL, "https://") || strings.HasPrefix(c.DLQURL, "http://"),
		"DLQURL", c.DLQURL, "must be an SQS queue URL (https://...)")
	return v.Err()
}

// The values the batch works with, pass.Off read as zero.
func (c Config) deferSeconds() int32          { return int32(max(c.Defer, 0) / time.Second) }
func (c Config) retries() int                 { return max(c.RetryAttempts, 0) }
func (c Config) retryInterval() time.Duration { return max(c.RetryInterval, 0) }

// Options are the injectable parts of a Service.
type Options struct {
	pass.Options
	// SQS sends bad input to the DLQ and defers messages (required).
	SQS SQS
}

// Service handles batches of rollback reports. Safe for concurrent use.
type Service struct {
	// Handler's Handle is the Lambda handler: one batch, one JSON log
	// line, one EMF line, and the partial batch response. It never
	// returns an error: an error would fail the whole batch, and failures
	// are reported per message. The context carries the Lambda request,
	// which the logger turns into the line's requestId.
	*pass.Handler[events.SQSEvent, *Result, events.SQSEventResponse]
	kit      *pass.Kit
	cfg      Config
	sqs      SQS
	events   *store.Events
	queues   *queueURLs
	checkSQL string
}

// New applies the defaults, validates cfg and builds a Service. db runs the
// statements: in production the pgx pool, which drops a connection that
// failed and dials a fresh one for the next statement.
func New(db pass.DB, cfg Config, opts Options) (*Service, error) {
	kit, cfg, err := pass.Configure("compensate", db, cfg, opts.Options)
	if err != nil {
		return nil, err
	}
	if opts.SQS == nil {
		return nil, &setting.Error{Pass: "compensate", Field: "SQS", Value: nil, Reason: "must not be nil"}
	}
	s := &Service{
		kit:      kit,
		cfg:      cfg,
		sqs:      opts.SQS,
		events:   store.NewEvents(store.MustSchema(cfg.Schema)),
		queues:   &queueURLs{client: opts.SQS},
		checkSQL: checkFile.Statement("check", cfg.Schema),
	}
	s.Handler = pass.NewHandler("compensate", &kit.Options, s.RunOnce,
		func(r *Result, _ error) (events.SQSEventResponse, error) { return r.Response(), nil }).
		WithMessage(func(*Result) string { return "compensate batch" })
	return s, nil
}

// Package config reads the outboxkeeper environment (DESIGN §7) once, at
// init. Every value is validated here so a bad deployment fails before the
// first invocation, with an error that names the variable and the value.
package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/shared/fill"
	"github.com/outboxkeeper/outboxkeeper/shared/store"
)

// Lookup reads one variable; os.LookupEnv in production, a map in tests.
type Lookup func(name string) (string, bool)

// Environment is the process environment.
func Environment() Lookup { return os.LookupEnv }

// FromMap is a Lookup over a fixed map, for tests and tools.
func FromMap(vars map[string]string) Lookup {
	return func(name string) (string, bool) {
		v, ok := vars[name]
		return v, ok
	}
}

// Error names the variable that failed validation and the value it had.
type Error struct {
	Variable string
	Value    string
	Reason   string
}

func (e *Error) Error() string {
	return fmt.Sprintf("config: %s=%q: %s", e.Variable, e.Value, e.Reason)
}

// Database says how to reach PostgreSQL and which schema holds the outbox.
type Database struct {
	// URL is a pgx connection string (DATABASE_URL).
	URL string
	// SecretARN names a Secrets Manager secret in the RDS JSON shape
	// (DATABASE_SECRET_ARN); used instead of URL.
	SecretARN string
	// IAMAuth asks for a fresh RDS IAM token per new connection
	// (DATABASE_IAM_AUTH). The host, port, user and database come from URL.
	IAMAuth bool
	// Schema holds the outbox tables (OUTBOX_SCHEMA, default "outbox"). It
	// is a plain identifier, and always quoted when it reaches SQL.
	Schema string
}

// Sweep tunes the sweep pass (DESIGN §6).
type Sweep struct {
	// StuckAfter is how long a delivery may stay delivered-but-unacked,
	// measured from delivered_at (SWEEP_STUCK_AFTER, default 60s).
	StuckAfter time.Duration
	// BatchLimit caps the rows one reset statement touches
	// (SWEEP_BATCH_LIMIT, default 1000).
	BatchLimit int
	// MaxRedeliveries is how many resets a row gets before it is dead;
	// 0 means never (SWEEP_MAX_REDELIVERIES, default 10).
	MaxRedeliveries int
	// PassBudget bounds one pass (SWEEP_PASS_BUDGET, default 20s).
	PassBudget time.Duration
}

// Compensate tunes the rollback-report handler (DESIGN §5).
type Compensate struct {
	// DLQURL receives bad input with an `error` attribute
	// (COMPENSATE_DLQ_URL). Empty: bad input is reported as a failed item
	// and the queue's redrive policy moves it.
	DLQURL string
	// MaxSequences caps one report (COMPENSATE_MAX_SEQUENCES, default 10000).
	MaxSequences int
	// Defer is the visibility given to a report whose writer still runs
	// (COMPENSATE_DEFER, default 2s).
	Defer time.Duration
	// MaxDeferrals is the receive count after which a report whose writer
	// still runs is dropped and left to the fill function
	// (COMPENSATE_MAX_DEFERRALS, default 3).
	MaxDeferrals int
	// RetryAttempts and RetryInterval pace retries of transient database
	// errors (COMPENSATE_RETRY_ATTEMPTS default 5, COMPENSATE_RETRY_INTERVAL
	// default 500ms). RetryAttempts counts retries after the first try, as
	// §5 says "retried N times"; 0 means one try only.
	RetryAttempts int
	RetryInterval time.Duration
}

// Defaults, as in DESIGN §7.
const (
	DefaultSchema = store.DefaultSchema

	DefaultSweepStuckAfter      = 60 * time.Second
	DefaultSweepBatchLimit      = 1000
	DefaultSweepMaxRedeliveries = 10
	DefaultSweepPassBudget      = 20 * time.Second

	DefaultCompensateMaxSequences  = 10000
	DefaultCompensateDefer         = 2 * time.Second
	DefaultCompensateMaxDeferrals  = 3
	DefaultCompensateRetryAttempts = 5
	DefaultCompensateRetryInterval = 500 * time.Millisecond
)

// Variable describes one environment variable the configuration reads.
type Variable struct {
	Name string
	// UsedBy lists the functions that read it: "fill", "sweep", "compensate".
	UsedBy []string
}

var all = []string{"fill", "sweep", "compensate"}

// Variables lists every variable read here, for the template tests and docs.
func Variables() []Variable {
	return []Variable{
		{"DATABASE_URL", all},
		{"DATABASE_SECRET_ARN", all},
		{"DATABASE_IAM_AUTH", all},
		{"OUTBOX_SCHEMA", all},
		{"FILL_GRACE", []string{"fill"}},
		{"FILL_BATCH_LIMIT", []string{"fill"}},
		{"FILL_PAGE_SIZE", []string{"fill"}},
		{"FILL_PASS_BUDGET", []string{"fill"}},
		{"FILL_WATCH", []string{"fill"}},
		{"FILL_TICK", []string{"fill"}},
		{"SWEEP_STUCK_AFTER", []string{"sweep"}},
		{"SWEEP_BATCH_LIMIT", []string{"sweep"}},
		{"SWEEP_MAX_REDELIVERIES", []string{"sweep"}},
		{"SWEEP_PASS_BUDGET", []string{"sweep"}},
		{"COMPENSATE_DLQ_URL", []string{"compensate"}},
		{"COMPENSATE_MAX_SEQUENCES", []string{"compensate"}},
		{"COMPENSATE_DEFER", []string{"compensate"}},
		{"COMPENSATE_MAX_DEFERRALS", []string{"compensate"}},
		{"COMPENSATE_RETRY_ATTEMPTS", []string{"compensate"}},
		{"COMPENSATE_RETRY_INTERVAL", []string{"compensate"}},
	}
}

// ValidSchema reports why name cannot be an outbox schema, or nil.
func ValidSchema(name string) error { return store.ValidSchema(name) }

// LoadDatabase reads DATABASE_URL, DATABASE_SECRET_ARN, DATABASE_IAM_AUTH and
// OUTBOX_SCHEMA. Exactly one of the URL or the secret must be given.
func LoadDatabase(env Lookup) (Database, error) {
	r := reader{env: env}
	db := Database{
		URL:       r.str("DATABASE_URL"),
		SecretARN: r.str("DATABASE_SECRET_ARN"),
		IAMAuth:   r.boolean("DATABASE_IAM_AUTH", false),
		Schema:    r.schema("OUTBOX_SCHEMA"),
	}
	switch {
	case r.err != nil:
	case db.URL == "" && db.SecretARN == "":
		r.fail("DATABASE_URL", "", "set DATABASE_URL or DATABASE_SECRET_ARN")
	case db.URL != "" && db.SecretARN != "":
		r.fail("DATABASE_SECRET_ARN", db.SecretARN, "set only one of DATABASE_URL and DATABASE_SECRET_ARN")
	case db.SecretARN != "" && !strings.HasPrefix(db.SecretARN, "arn:"):
		r.fail("DATABASE_SECRET_ARN", db.SecretARN, "must be a Secrets Manager ARN (arn:...)")
	case db.IAMAuth && db.URL == "":
		r.fail("DATABASE_IAM_AUTH", "true", "IAM auth takes host, port, user and database from DATABASE_URL, which is empty")
	}
	return db, r.err
}

// fillVariables names the variable each fill.Config field comes from.
var fillVariables = map[string]string{
	"Schema": "OUTBOX_SCHEMA", "Grace": "FILL_GRACE", "BatchLimit": "FILL_BATCH_LIMIT",
	"PageSize": "FILL_PAGE_SIZE", "PassBudget": "FILL_PASS_BUDGET", "Bounded": "FILL_WATCH", "Tick": "FILL_TICK",
}

// LoadFill reads OUTBOX_SCHEMA and the FILL_* variables into a fill.Config
// with its defaults applied. It only parses; fill.Config.Validate decides
// what is acceptable, and its complaint is returned naming the variable.
func LoadFill(env Lookup) (fill.Config, error) {
	r := reader{env: env}
	c := fill.Config{
		Schema:     r.str("OUTBOX_SCHEMA"),
		Grace:      r.parseDuration("FILL_GRACE"),
		BatchLimit: r.parseInt("FILL_BATCH_LIMIT"),
		PageSize:   r.parseInt("FILL_PAGE_SIZE"),
		PassBudget: r.parseDuration("FILL_PASS_BUDGET"),
		Bounded:    !r.boolean("FILL_WATCH", true),
		Tick:       r.parseDuration("FILL_TICK"),
	}
	if r.err != nil {
		return fill.Config{}, r.err
	}
	if err := c.Validate(); err != nil {
		return fill.Config{}, r.explain(err, fillVariables)
	}
	return c.WithDefaults(), nil
}

// LoadSweep reads the SWEEP_* variables.
func LoadSweep(env Lookup) (Sweep, error) {
	r := reader{env: env}
	c := Sweep{
		StuckAfter:      r.duration("SWEEP_STUCK_AFTER", DefaultSweepStuckAfter, time.Second),
		BatchLimit:      r.integer("SWEEP_BATCH_LIMIT", DefaultSweepBatchLimit, 1, 100000),
		MaxRedeliveries: r.integer("SWEEP_MAX_REDELIVERIES", DefaultSweepMaxRedeliveries, 0, 1000000),
		PassBudget:      r.duration("SWEEP_PASS_BUDGET", DefaultSweepPassBudget, time.Second),
	}
	return c, r.err
}

// LoadCompensate reads the COMPENSATE_* variables.
func LoadCompensate(env Lookup) (Compensate, error) {
	r := reader{env: env}
	c := Compensate{
		DLQURL:       r.url("COMPENSATE_DLQ_URL"),
		MaxSequences: r.integer("COMPENSATE_MAX_SEQUENCES", DefaultCompensateMaxSequences, 1, 100000),
		// SQS caps a visibility timeout at 12 hours and counts whole seconds.
		Defer:         r.duration("COMPENSATE_DEFER", DefaultCompensateDefer, 0, 12*time.Hour),
		MaxDeferrals:  r.integer("COMPENSATE_MAX_DEFERRALS", DefaultCompensateMaxDeferrals, 1, 1000),
		RetryAttempts: r.integer("COMPENSATE_RETRY_ATTEMPTS", DefaultCompensateRetryAttempts, 0, 100),
		RetryInterval: r.duration("COMPENSATE_RETRY_INTERVAL", DefaultCompensateRetryInterval, 0),
	}
	if r.err == nil && c.Defer%time.Second != 0 {
		r.fail("COMPENSATE_DEFER", r.str("COMPENSATE_DEFER"), "SQS visibility timeouts are whole seconds")
	}
	return c, r.err
}

// reader keeps the first error so a loader reads like a struct literal.
type reader struct {
	env Lookup
	err error
}

func (r *reader) fail(name, value, reason string) {
	if r.err == nil {
		r.err = &Error{Variable: name, Value: value, Reason: reason}
	}
}

func (r *reader) str(name string) string {
	v, _ := r.env(name)
	return strings.TrimSpace(v)
}

func (r *reader) schema(name string) string {
	v := r.str(name)
	if v == "" {
		return DefaultSchema
	}
	if err := ValidSchema(v); err != nil {
		r.fail(name, v, err.Error())
	}
	return v
}

func (r *reader) url(name string) string {
	v := r.str(name)
	if v != "" && !strings.HasPrefix(v, "https://") && !strings.HasPrefix(v, "http://") {
		r.fail(name, v, "must be an SQS queue URL (https://...)")
	}
	return v
}

func (r *reader) boolean(name string, def bool) bool {
	v := r.str(name)
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, v, "must be true or false")
	}
	return b
}

func (r *reader) integer(name string, def, min, max int) int {
	v := r.str(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		r.fail(name, v, "must be a whole number")
	case n < min || n > max:
		r.fail(name, v, fmt.Sprintf("must be between %d and %d", min, max))
	}
	return n
}

// A pass's Config reads a zero field as "the default", so a variable set
// to zero explicitly is handed over as -1: the pass takes that for "none"
// where none is allowed (FILL_GRACE=0s is fill.NoGrace) and refuses it
// elsewhere, and explain quotes the variable as it was set.
const explicitZero = -1

// parseInt parses a whole number; unset is 0, the pass's default.
func (r *reader) parseInt(name string) int {
	v := r.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil:
		r.fail(name, v, "must be a whole number")
	case n == 0:
		return explicitZero
	}
	return n
}

// parseDuration parses a non-negative Go duration ("2s", "500ms"); unset
// is 0, the pass's default.
func (r *reader) parseDuration(name string) time.Duration {
	v := r.str(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		r.fail(name, v, `must be a Go duration such as "2s" or "500ms"`)
	case d < 0:
		r.fail(name, v, "must not be negative")
	case d == 0:
		return explicitZero
	}
	return d
}

// explain turns a pass's *setting.Error into an *Error naming the
// variable the field came from, with the value as it was set.
func (r *reader) explain(err error, variables map[string]string) error {
	var se *setting.Error
	if !errors.As(err, &se) {
		return err
	}
	name, ok := variables[se.Field]
	if !ok {
		return err
	}
	value := r.str(name)
	if value == "" {
		value = fmt.Sprint(se.Value)
	}
	return &Error{Variable: name, Value: value, Reason: se.Reason}
}

// duration parses Go syntax ("2s", "500ms"); limits[0] is the minimum and
// limits[1], when given, the maximum.
func (r *reader) duration(name string, def time.Duration, limits ...time.Duration) time.Duration {
	v := r.str(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		r.fail(name, v, `must be a Go duration such as "2s" or "500ms"`)
	case d < limits[0]:
		r.fail(name, v, fmt.Sprintf("must be at least %s", limits[0]))
	case len(limits) > 1 && d > limits[1]:
		r.fail(name, v, fmt.Sprintf("must be at most %s", limits[1]))
	}
	return d
}

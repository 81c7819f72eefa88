// Package config reads the outboxkeeper environment (DESIGN §7) once, at
// init. Every value is validated here so a bad deployment fails before the
// first invocation, with an error that names the variable and the value.
package config

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
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

// Fill tunes the fill pass (DESIGN §4).
type Fill struct {
	// Grace is how long a stall must last before its gap may be filled
	// (FILL_GRACE, default 2s): most stalls are a writer that commits a
	// moment late, and those must cost no writes.
	Grace time.Duration
	// BatchLimit caps the placeholders one insert statement writes
	// (FILL_BATCH_LIMIT, default 1000), keeping each statement short.
	BatchLimit int
	// PageSize is how many rows one page read returns, and so the width of
	// an episode's window (FILL_PAGE_SIZE, default 1000).
	PageSize int
	// PassBudget bounds one pass (FILL_PASS_BUDGET, default 20s); the
	// Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration
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
	DefaultSchema = "outbox"

	DefaultFillGrace      = 2 * time.Second
	DefaultFillBatchLimit = 1000
	DefaultFillPageSize   = 1000
	DefaultFillPassBudget = 20 * time.Second

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

// identifier is a plain, unquoted-safe PostgreSQL identifier. Anything else
// is refused rather than escaped: a schema name is configuration, not data.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// ValidSchema reports why name cannot be an outbox schema, or nil.
func ValidSchema(name string) error {
	if !identifier.MatchString(name) {
		return errors.New("must be a plain lower-case identifier: a letter or _, then letters, digits or _, at most 63 bytes")
	}
	if strings.HasPrefix(name, "pg_") {
		return errors.New("names starting with pg_ are reserved by PostgreSQL")
	}
	return nil
}

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

// LoadFill reads the FILL_* variables.
func LoadFill(env Lookup) (Fill, error) {
	r := reader{env: env}
	c := Fill{
		Grace:      r.duration("FILL_GRACE", DefaultFillGrace, 0),
		BatchLimit: r.integer("FILL_BATCH_LIMIT", DefaultFillBatchLimit, 1, 100000),
		PageSize:   r.integer("FILL_PAGE_SIZE", DefaultFillPageSize, 1, 100000),
		PassBudget: r.duration("FILL_PASS_BUDGET", DefaultFillPassBudget, time.Second),
	}
	return c, r.err
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

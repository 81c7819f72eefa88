// Package config reads the outboxkeeper environment once, at init, into the
// configs the passes own (fill.Config, sweep.Config, compensate.Config,
// prune.Config, relay.Config, with Load) and the database login (LoadDatabase). It
// only parses: each pass's Config.Validate decides what is acceptable, and
// this package returns its complaint naming the variable and the value, so
// a bad deployment fails before the first invocation saying what to fix.
package config

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/pg"
	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
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

// Database says how to reach PostgreSQL (the pool's Login) and which
// schema holds the outbox.
type Database struct {
	pg.Login
	// Schema holds the outbox tables (OUTBOX_SCHEMA, default "outbox"). It
	// is a plain identifier, and always quoted when it reaches SQL.
	Schema string
}

// DefaultSchema is the outbox schema when OUTBOX_SCHEMA is not set.
const DefaultSchema = store.DefaultSchema

// Variable describes one environment variable the configuration reads.
type Variable struct {
	Name string
	// UsedBy lists the functions that read it: "fill", "sweep",
	// "compensate", "prune", "relay", "deliver", "migrate".
	UsedBy []string
}

// all is every function: each logs in, and migrate applies the schema.
var all = []string{"fill", "sweep", "compensate", "prune", "relay", "deliver", "migrate"}

// emitters are the functions that write metrics, each with the Stack
// dimension (LoadStack); migrate writes none.
var emitters = []string{"fill", "sweep", "compensate", "prune", "relay", "deliver"}

// Variables lists every variable read here, for the template tests and docs.
func Variables() []Variable {
	return []Variable{
		{"DATABASE_URL", all},
		{"DATABASE_SECRET_ARN", all},
		{"DATABASE_IAM_AUTH", all},
		{"DATABASE_HOST", all},
		{"DATABASE_PORT", all},
		{"DATABASE_NAME", all},
		{"DATABASE_CA_PEM", all},
		{"DATABASE_CA_SECRET_ARN", all},
		{"OUTBOX_SCHEMA", all},
		{"MAINTAINER_SECRET_ARN", []string{"migrate"}},
		{"MAINTAINER_IAM_USER", []string{"migrate"}},
		{"STACK_NAME", emitters},
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
		{"COMPENSATE_PASS_BUDGET", []string{"compensate"}},
		{"PRUNE_ACKED_AFTER", []string{"prune"}},
		{"PRUNE_DEAD_AFTER", []string{"prune"}},
		{"PRUNE_EVENTS_AFTER", []string{"prune"}},
		{"PRUNE_BATCH_LIMIT", []string{"prune"}},
		{"PRUNE_PASS_BUDGET", []string{"prune"}},
		{"RELAY_NAME", []string{"relay"}},
		{"RELAY_TARGET", []string{"relay"}},
		{"RELAY_TOPICS", []string{"relay"}},
		{"RELAY_GROUP_BY", []string{"relay"}},
		{"RELAY_AGGREGATE_TYPES", []string{"relay"}},
		{"RELAY_SOURCE", []string{"relay"}},
		{"RELAY_MAX_ATTEMPTS", []string{"relay"}},
		{"RELAY_TICK", []string{"relay"}},
		{"RELAY_BATCH_LIMIT", []string{"relay"}},
		{"RELAY_CONCURRENCY", []string{"relay"}},
		{"RELAY_PASS_BUDGET", []string{"relay"}},
		{"RELAY_WATCH", []string{"relay"}},
		{"RELAY_START", []string{"relay"}},
		{"DELIVER_TICK", []string{"deliver"}},
		{"DELIVER_BATCH_LIMIT", []string{"deliver"}},
		{"DELIVER_CONCURRENCY", []string{"deliver"}},
		{"DELIVER_WEBHOOK_TIMEOUT", []string{"deliver"}},
		{"DELIVER_WEBHOOK_HOSTS", []string{"deliver"}},
		{"DELIVER_SIGNING_SECRET_ARN", []string{"deliver"}},
		{"DELIVER_CA_BUNDLE", []string{"deliver"}},
		{"DELIVER_ALLOW_LOOPBACK", []string{"deliver"}},
		{"DELIVER_PASS_BUDGET", []string{"deliver"}},
		{"DELIVER_WATCH", []string{"deliver"}},
	}
}

// ValidSchema reports why name cannot be an outbox schema, or nil.
func ValidSchema(name string) error { return store.ValidSchema(name) }

// LoadDatabase reads the DATABASE_* variables and OUTBOX_SCHEMA. Exactly
// one of the URL or the secret must be given; host, port and name only
// with the secret (a URL carries its own), and at most one CA source.
func LoadDatabase(env Lookup) (Database, error) {
	r := reader{env: env}
	db := Database{
		Login: pg.Login{
			URL:         r.str("DATABASE_URL"),
			SecretARN:   r.str("DATABASE_SECRET_ARN"),
			IAMAuth:     r.boolean("DATABASE_IAM_AUTH", false),
			Host:        r.host("DATABASE_HOST"),
			Port:        r.port("DATABASE_PORT"),
			Name:        r.str("DATABASE_NAME"),
			CAPEM:       r.str("DATABASE_CA_PEM"),
			CASecretARN: r.str("DATABASE_CA_SECRET_ARN"),
		},
		Schema: r.schema("OUTBOX_SCHEMA"),
	}
	overrides := []struct {
		name, value string
	}{{"DATABASE_HOST", db.Host}, {"DATABASE_PORT", r.str("DATABASE_PORT")}, {"DATABASE_NAME", db.Name}}
	for _, o := range overrides {
		if o.value != "" && db.SecretARN == "" {
			r.fail(o.name, o.value, "applies to DATABASE_SECRET_ARN only; a DATABASE_URL names its own host, port and database")
		}
	}
	switch {
	case r.err != nil:
	case db.CAPEM != "" && db.CASecretARN != "":
		r.fail("DATABASE_CA_SECRET_ARN", db.CASecretARN, "set only one of DATABASE_CA_PEM and DATABASE_CA_SECRET_ARN")
	case db.CASecretARN != "" && !strings.HasPrefix(db.CASecretARN, "arn:"):
		r.fail("DATABASE_CA_SECRET_ARN", db.CASecretARN, "must be a Secrets Manager ARN (arn:...)")
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

// LoadStack reads STACK_NAME: the Stack dimension of every metric, which
// the template sets from AWS::StackName so that two stacks in one account
// and region never mix their figures. Unset, it is metrics.DefaultStack.
func LoadStack(env Lookup) (string, error) {
	r := reader{env: env}
	v := r.str("STACK_NAME")
	if v == "" {
		return metrics.DefaultStack, nil
	}
	if err := metrics.ValidStack(v); err != nil {
		r.fail("STACK_NAME", v, err.Error())
	}
	return v, r.err
}

// PassConfig is what Load fills: a pass's Config (fill.Config,
// sweep.Config, compensate.Config, ...), whose fields name their variable
// in an `env` tag.
type PassConfig[T any] interface {
	Validate() error
	WithDefaults() T
}

// Load reads a pass's Config from env. Each field tagged `env:"NAME"` is
// parsed by its type — string, int, time.Duration, bool — and a bool tagged
// `env:"NAME,not"` holds the negation (FILL_WATCH=false is Bounded). An
// unset variable leaves the field zero, which the pass reads as its
// default; a variable set to zero is handed over as -1 (see
// explicitZero). Load only parses: the Config's own Validate decides what
// is acceptable, and its complaint comes back naming the variable. The
// result has its defaults applied.
//
// Reflection keeps this package free of the passes: a Lambda binary links
// its own pass only, not every other one's dependencies.
func Load[T PassConfig[T]](env Lookup) (T, error) {
	var c T
	r := reader{env: env}
	v := reflect.ValueOf(&c).Elem()
	vars := map[string]string{}
	for i := range v.NumField() {
		f := v.Type().Field(i)
		tag, ok := f.Tag.Lookup("env")
		if !ok {
			continue
		}
		name, negate := strings.CutSuffix(tag, ",not")
		vars[f.Name] = name
		field := v.Field(i)
		switch {
		case field.Type() == reflect.TypeFor[time.Duration]():
			field.SetInt(int64(r.parseDuration(name)))
		case field.Kind() == reflect.Int:
			field.SetInt(int64(r.parseInt(name)))
		case field.Kind() == reflect.String:
			field.SetString(r.str(name))
		case field.Kind() == reflect.Bool:
			b := r.boolean(name, negate)
			field.SetBool(b != negate)
		default:
			panic(fmt.Sprintf("config: %T.%s: cannot load a %s from %s", c, f.Name, field.Type(), name))
		}
	}
	if r.err != nil {
		return c, r.err
	}
	if err := c.Validate(); err != nil {
		return c, r.explain(err, vars)
	}
	return c.WithDefaults(), nil
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

// host reads a host name or address; what would change a URL's meaning
// if spliced into one is refused.
func (r *reader) host(name string) string {
	v := r.str(name)
	if strings.ContainsAny(v, " \t/@?#") {
		r.fail(name, v, "must be a host name or IP address")
	}
	return v
}

// port reads a TCP port; unset is 0.
func (r *reader) port(name string) int {
	v := r.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 {
		r.fail(name, v, "must be a TCP port, 1 to 65535")
	}
	return n
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

// A pass's Config reads a zero field as "the default", so a variable set
// to zero explicitly is handed over as pass.Off: the pass takes that for
// "none" where its Bound allows it (FILL_GRACE=0s is no grace) and refuses
// it elsewhere, and explain quotes the variable as it was set.
const explicitZero = pass.Off

// parseNumber parses a non-negative number with parse; unset is 0, the
// pass's default, and a bad value fails saying it must be what.
func parseNumber[T int | time.Duration](r *reader, name string, parse func(string) (T, error), what string) T {
	v := r.str(name)
	if v == "" {
		return 0
	}
	n, err := parse(v)
	switch {
	case err != nil:
		r.fail(name, v, "must be "+what)
	case n < 0:
		r.fail(name, v, "must not be negative")
	case n == 0:
		return explicitZero
	}
	return n
}

// parseInt parses a whole number.
func (r *reader) parseInt(name string) int {
	return parseNumber(r, name, strconv.Atoi, "a whole number")
}

// parseDuration parses a Go duration ("2s", "500ms").
func (r *reader) parseDuration(name string) time.Duration {
	return parseNumber(r, name, time.ParseDuration, `a Go duration such as "2s" or "500ms"`)
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

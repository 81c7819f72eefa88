// Package relay is the relay function's logic (docs/design.md §6d): the
// ordered stream of committed events to the team's bus. One pass reads the
// stream after the relay's position through read_events, so it can never
// pass a sequence whose writer may still commit; sends each batch to the
// target (an EventBridge bus, an SNS topic, an SQS queue or a Kinesis
// stream, shared/target) in order within each group; and moves its
// position, the registered consumer relay:<RELAY_NAME>, with
// commit_position after each batch the target accepted, so prune never
// deletes what it has not sent. An event the target refuses for itself is
// tried RELAY_MAX_ATTEMPTS times, then parked in <schema>.relay_parked and
// the stream goes on.
//
// A pass watches like the fill's: a lease named relay:<RELAY_NAME>, a tick
// of one statement while idle, no sleep while pages come back full, and a
// hand-over to the next scheduled invocation, so some pass is always
// relaying. Every statement and every call to the target is bounded by the
// pass budget, and transient errors are retried inside it.
package relay

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/outboxkeeper/outboxkeeper/internal/setting"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	relaysql "github.com/outboxkeeper/outboxkeeper/shared/relay/parked"
	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

// Defaults of Config, as the README's configuration table lists them.
const (
	DefaultName        = "default"
	DefaultTopics      = "*"
	DefaultMaxAttempts = 5
	DefaultTick        = 200 * time.Millisecond
	DefaultBatchLimit  = 1000
	DefaultConcurrency = 4
	// DefaultPassBudget outlasts the schedule's minute, so a watching pass
	// is still there when the next one comes to take over.
	DefaultPassBudget = 85 * time.Second
)

// NeverPark as MaxAttempts (RELAY_MAX_ATTEMPTS=0) parks nothing: the relay
// stops at a refused event and keeps trying it.
const NeverPark = pass.Off

// Where a new relay starts (RELAY_START).
const (
	// StartEarliest: from the beginning of the stream (position 0).
	StartEarliest = "earliest"
	// StartLatest: at the fill watermark the relay first sees.
	StartLatest = "latest"
)

// MaxName is the longest RELAY_NAME, in bytes.
const MaxName = 60

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// ConsumerName is the consumer (and the lease) a relay named name moves.
func ConsumerName(name string) string { return "relay:" + name }

// Config tunes the relay pass. A zero field means its default, applied by
// New, so a Config with only Target set is the documented default
// configuration.
type Config struct {
	// Schema holds the outbox tables (OUTBOX_SCHEMA). Default "outbox".
	Schema string `env:"OUTBOX_SCHEMA"`
	// Name names the relay (RELAY_NAME, default "default"): its position
	// is the consumer relay:<Name> and its lease is named the same, so
	// relays of different names on one schema run side by side. Letters,
	// digits, _ and -, starting with a letter or digit, at most 60 bytes.
	Name string `env:"RELAY_NAME"`
	// Target is where events go (RELAY_TARGET, required): an EventBridge
	// bus, SNS topic, SQS queue or Kinesis stream ARN, or an SQS queue URL
	// (shared/target.Parse).
	Target string `env:"RELAY_TARGET"`
	// Topics selects the events sent (RELAY_TOPICS, default "*"):
	// comma-separated patterns where * matches any run of characters.
	// Others are passed over, unsent.
	Topics string `env:"RELAY_TOPICS"`
	// AggregateTypes selects by the aggregate_type routing column
	// (RELAY_AGGREGATE_TYPES, default empty = every event):
	// comma-separated names, matched exactly. When set, an event is sent
	// only if it also matches Topics and its aggregate_type is listed;
	// others are passed over, unsent.
	AggregateTypes string `env:"RELAY_AGGREGATE_TYPES"`
	// GroupBy orders events (RELAY_GROUP_BY, default "topic"): "topic",
	// "none", "aggregate_id" (the routing column), or a header's name
	// (headers->>name). An event without the header or the aggregate_id is
	// grouped by its topic. Within a group events go in sequence order;
	// groups go concurrently. A FIFO target needs a group: "none" is
	// refused there.
	GroupBy string `env:"RELAY_GROUP_BY"`
	// Source is the EventBridge Source of every event (RELAY_SOURCE,
	// default "outboxkeeper.<schema>"); other targets have none.
	Source string `env:"RELAY_SOURCE"`
	// MaxAttempts is how many times an event the target refuses for
	// itself (too large, invalid) is tried, the first included, before it
	// is parked (RELAY_MAX_ATTEMPTS, default 5). NeverPark (0 in the
	// variable): never park; the relay stops at the event.
	MaxAttempts int `env:"RELAY_MAX_ATTEMPTS"`
	// Tick is how often an idle pass looks for new events, and the first
	// wait after a failed send (RELAY_TICK, default 200ms).
	Tick time.Duration `env:"RELAY_TICK"`
	// BatchLimit caps the events one read_events call returns, and so a
	// batch (RELAY_BATCH_LIMIT, default 1000, at most 10000).
	BatchLimit int `env:"RELAY_BATCH_LIMIT"`
	// Concurrency is how many calls to the target may be in flight at once
	// (RELAY_CONCURRENCY, default 4); one group's are never concurrent.
	Concurrency int `env:"RELAY_CONCURRENCY"`
	// PassBudget bounds one pass (RELAY_PASS_BUDGET, default 85s); the
	// Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration `env:"RELAY_PASS_BUDGET"`
	// Bounded ends a pass as soon as it has caught up (RELAY_WATCH=false).
	// By default a pass keeps watching until its budget ends, and a
	// watching pass that finds the lease held waits to be handed it.
	Bounded bool `env:"RELAY_WATCH,not"`
	// Start is where a relay with no position yet begins (RELAY_START):
	// StartEarliest (default) or StartLatest.
	Start string `env:"RELAY_START"`
}

// bounds is every numeric field's default and accepted values, once.
var bounds = []pass.Bound{
	pass.Int("MaxAttempts", "RELAY_MAX_ATTEMPTS", DefaultMaxAttempts, pass.Ints(1, 1000)).
		OrOff("never park (the relay then stops at a refused event)"),
	pass.Dur("Tick", "RELAY_TICK", DefaultTick, pass.Durations(10*time.Millisecond, time.Minute)),
	pass.Int("BatchLimit", "RELAY_BATCH_LIMIT", DefaultBatchLimit, pass.Ints(1, outbox.MaxRead)).Because("read_events returns at most 10000"),
	pass.Int("Concurrency", "RELAY_CONCURRENCY", DefaultConcurrency, pass.Ints(1, 64)),
	pass.PassBudget("RELAY_PASS_BUDGET", DefaultPassBudget),
}

// Bounds are the Config's numeric fields' defaults and accepted values.
func (Config) Bounds() []pass.Bound { return bounds }

// WithDefaults fills in every zero field.
func (c Config) WithDefaults() Config {
	c.Schema = cmp.Or(c.Schema, store.DefaultSchema)
	c.Name = cmp.Or(strings.TrimSpace(c.Name), DefaultName)
	c.Topics = cmp.Or(strings.TrimSpace(c.Topics), DefaultTopics)
	c.GroupBy = cmp.Or(strings.TrimSpace(c.GroupBy), GroupByTopic)
	c.Source = cmp.Or(strings.TrimSpace(c.Source), "outboxkeeper."+c.Schema)
	c.Start = cmp.Or(strings.TrimSpace(c.Start), StartEarliest)
	return pass.WithDefaults(c, bounds)
}

// parsed is what Validate reads out of a Config's strings.
type parsed struct {
	target         target.Target
	topics         Topics
	aggregateTypes AggregateTypes
	groupBy        GroupBy
}

// Validate is the one check of a Config, on its defaults; its errors (a
// *setting.Error) name the field, which shared/config turns into the
// variable's name.
func (c Config) Validate() error {
	_, err := c.WithDefaults().parse()
	return err
}

func (c Config) parse() (parsed, error) {
	var p parsed
	if err := pass.Validate("relay", c, bounds); err != nil {
		return p, err
	}
	v := setting.Checker{Pass: "relay"}
	v.Check(len(c.Name) <= MaxName && nameRE.MatchString(c.Name), "Name", c.Name,
		"must be letters, digits, _ and -, starting with a letter or digit, at most 60 bytes")
	t, err := target.Parse(c.Target)
	var pe *target.ParseError
	switch {
	case strings.TrimSpace(c.Target) == "":
		v.Check(false, "Target", c.Target, "is required: an EventBridge bus, SNS topic, SQS queue or Kinesis stream ARN, or an SQS queue URL")
	case errors.As(err, &pe):
		v.Check(false, "Target", c.Target, pe.Err.Error())
	case err != nil:
		v.Check(false, "Target", c.Target, err.Error())
	}
	p.target = t
	p.topics, err = ParseTopics(c.Topics)
	v.Check(err == nil, "Topics", c.Topics, errString(err))
	p.aggregateTypes, err = ParseAggregateTypes(c.AggregateTypes)
	v.Check(err == nil, "AggregateTypes", c.AggregateTypes, errString(err))
	p.groupBy, err = ParseGroupBy(c.GroupBy)
	v.Check(err == nil, "GroupBy", c.GroupBy, errString(err))
	if t.FIFO {
		v.Check(!p.groupBy.None(), "GroupBy", c.GroupBy,
			fmt.Sprintf("the target %s is FIFO, and every FIFO message needs a group: use topic or a header name", t))
	}
	if t.Kind == target.EventBridge {
		err = target.CheckSource(c.Source)
		v.Check(err == nil, "Source", c.Source, strings.TrimPrefix(errString(err), "target: "))
	}
	v.Check(c.Start == StartEarliest || c.Start == StartLatest, "Start", c.Start, "must be earliest or latest")
	return p, v.Err()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Options are the injectable parts of a Service.
type Options struct {
	pass.Options
	// AWS is the SDK configuration the target's client is built from
	// (awsenv.Load on Lambda).
	AWS aws.Config
	// LeaseTTL overrides the lease period (pass.LeaseTicks ticks, at least
	// pass.MinLeaseTTL).
	LeaseTTL time.Duration
}

// Service runs relay passes for one relay.
type Service struct {
	// Handler's Handle is the Lambda handler: the input (an EventBridge
	// Scheduler Input, a scheduled-event envelope, `{}`) says nothing the
	// pass needs. It runs one pass, writes one JSON log line and one EMF
	// line, and returns the Result as the response; a database that failed
	// for the whole budget is an error, so Lambda counts it. Waiting is not.
	*pass.Handler[json.RawMessage, *Result, *Result]
	kit    *pass.Kit
	cfg    Config
	sender *target.Sender
	parsed
	consumer string
	lease    *pass.Lease
	rides    rides
	sql      statements
	// round is the most messages one send carries (roundSize).
	round  int
	handle *pass.Handler[json.RawMessage, *Result, *Result]

	// afterSend runs between a send and its commit; tests stop a pass
	// exactly there.
	afterSend func()
}

// rides are the lease statements with what the relay's ride on them.
type rides struct {
	acquire, renew, handOver, finish pass.Ride
}

// New applies the defaults, validates cfg and builds a Service with the
// target's SDK client. db is normally the function's pool: every
// statement is its own transaction.
func New(db pass.DB, cfg Config, opts Options) (*Service, error) {
	kit, cfg, err := pass.Configure("relay", db, cfg, opts.Options)
	if err != nil {
		return nil, err
	}
	p, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	sender, err := target.New(opts.AWS, target.Config{Target: p.target, Source: cfg.Source, Concurrency: cfg.Concurrency})
	if err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	sql := newStatements(cfg.Schema)
	consumer := ConsumerName(cfg.Name)
	// The watching tick's one statement is the lease poll, carrying the
	// probe: is there anything to read after the position?
	lease := pass.NewLease(pass.LeaseSpec{Schema: cfg.Schema, Name: consumer, Probe: sql.readable, Tick: cfg.Tick, TTL: opts.LeaseTTL})
	s := &Service{
		kit: kit, cfg: cfg, sender: sender, parsed: p,
		consumer: consumer,
		lease:    lease,
		rides: rides{
			acquire:  lease.Ride(pass.StepAcquire, sql.load),
			renew:    lease.Ride(pass.StepRenew, ""),
			handOver: lease.Ride(pass.StepHandOver, ""),
			finish:   lease.Ride(pass.StepFinish, sql.ended),
		},
		sql:   sql,
		round: roundSize(sender.Limits().Entries, cfg.Concurrency),
	}
	s.Handler = pass.Scheduled("relay", &kit.Options, s.RunOnce)
	return s, nil
}

// Config is the Service's configuration, its defaults applied.
func (s *Service) Config() Config { return s.cfg }

// event is one row the relay read: store's, with the relay's questions.
type event struct {
	Sequence   int64
	Topic      string
	Payload    json.RawMessage
	Headers    json.RawMessage
	RecordedAt time.Time
	FilledBy   string
	// The routing columns, empty when the writer gave none.
	AggregateType, AggregateID, EventType string
}

// Placeholder says the row marks an abandoned sequence: never sent.
func (e event) Placeholder() bool { return e.FilledBy != "" }

// header is the text of the header name (headers->>name): a string as it
// is, any other JSON value as its JSON text; absent for a missing header
// or null.
func (e event) header(name string) (string, bool) {
	if len(e.Headers) == 0 {
		return "", false
	}
	var h map[string]json.RawMessage
	if json.Unmarshal(e.Headers, &h) != nil {
		return "", false
	}
	raw, ok := h[name]
	if !ok || string(raw) == "null" {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, true
	}
	return string(raw), true
}

// statements are the relay's own, rendered once, and the consumer's two
// of the store: read_events and commit_position, as every consumer reads
// and commits.
type statements struct {
	readEvents, commitPosition string

	readable, load, ended          string
	recordRefusals, forgetRefusals string
	resendDue, resendDone          string
}

func newStatements(schema string) statements {
	return statements{
		readEvents:     store.EventsSQL.Statement("read_events", schema),
		commitPosition: store.ConsumersSQL.Statement("commit_position", schema),
		readable:       relaysql.SQL.Statement("readable", schema),
		load:           relaysql.SQL.Statement("load", schema),
		ended:          relaysql.SQL.Statement("ended", schema),
		recordRefusals: relaysql.SQL.Statement("record_refusals", schema),
		forgetRefusals: relaysql.SQL.Statement("forget_refusals", schema),
		resendDue:      relaysql.SQL.Statement("resend_due", schema),
		resendDone:     relaysql.SQL.Statement("resend_done", schema),
	}
}

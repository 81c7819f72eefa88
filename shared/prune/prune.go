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
// transaction-local statement_timeout (store.Bounded), so it runs through
// RDS Proxy and PgBouncer in transaction mode, and a pass cut off anywhere
// leaves every row either deleted or untouched.
package prune

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

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

// Config tunes the prune pass. A zero field means its default, applied by
// New, so Config{} is the documented default configuration. A retention of
// pass.Off (0 in its variable) deletes nothing of that kind.
type Config struct {
	// Schema holds the outbox tables (OUTBOX_SCHEMA). Default "outbox".
	Schema string `env:"OUTBOX_SCHEMA"`
	// AckedAfter is how long an acked delivery is kept, from acked_at
	// (PRUNE_ACKED_AFTER, default 24h; pass.Off keeps them forever).
	AckedAfter time.Duration `env:"PRUNE_ACKED_AFTER"`
	// DeadAfter is how long a dead delivery is kept, from dead_at, so an
	// operator has time to look at it and retry it (PRUNE_DEAD_AFTER,
	// default 168h; pass.Off keeps them).
	DeadAfter time.Duration `env:"PRUNE_DEAD_AFTER"`
	// EventsAfter is how long an event (real or placeholder) is kept, from
	// recorded_at (PRUNE_EVENTS_AFTER, default pass.Off: kept forever).
	// Never an event above the fill watermark or the slowest registered
	// consumer.
	EventsAfter time.Duration `env:"PRUNE_EVENTS_AFTER"`
	// BatchLimit caps the rows one delete statement removes
	// (PRUNE_BATCH_LIMIT, default 5000), keeping each transaction short.
	BatchLimit int `env:"PRUNE_BATCH_LIMIT"`
	// PassBudget bounds one pass (PRUNE_PASS_BUDGET, default 20s); the
	// Lambda deadline minus 2s bounds it further.
	PassBudget time.Duration `env:"PRUNE_PASS_BUDGET"`
}

// bounds is every numeric field's default and accepted values, once.
var bounds = []pass.Bound{
	pass.Dur("AckedAfter", "PRUNE_ACKED_AFTER", DefaultAckedAfter, pass.AtLeast(time.Second)).OrOff("keeping acked deliveries"),
	pass.Dur("DeadAfter", "PRUNE_DEAD_AFTER", DefaultDeadAfter, pass.AtLeast(time.Second)).OrOff("keeping dead deliveries"),
	pass.Dur("EventsAfter", "PRUNE_EVENTS_AFTER", pass.Off, pass.AtLeast(time.Second)).OrOff("keeping events"),
	pass.Int("BatchLimit", "PRUNE_BATCH_LIMIT", DefaultBatchLimit, pass.Ints(1, 100_000)),
	pass.PassBudget("PRUNE_PASS_BUDGET", DefaultPassBudget),
}

// Bounds, WithDefaults and Validate are the Config's one table of
// defaults and accepted values, applied by the kit: a zero field means its
// default, and Validate's error (a *setting.Error) names the field, which
// shared/config turns into the variable's name.
func (Config) Bounds() []pass.Bound   { return bounds }
func (c Config) WithDefaults() Config { return pass.WithDefaults(c, bounds) }
func (c Config) Validate() error      { return pass.Validate("prune", c, bounds) }

// Options are the injectable parts of a Service. Now is the pass's clock,
// for the budget and duration_ms only: retention cutoffs use the database
// clock.
type Options struct {
	pass.Options
}

// Service runs prune passes. It is safe for concurrent use, and several
// passes may overlap (a slow pass and the next hour's): each row is
// deleted by exactly one of them, and neither waits for the other.
type Service struct {
	// Handler's Handle is the Lambda handler: one pass, one JSON log line,
	// one EMF line, and the Result as the response; the input (a scheduled
	// event, a Scheduler Input, `{}`) means "prune now".
	*pass.Handler[json.RawMessage, *Result, *Result]
	kit        *pass.Kit
	cfg        Config
	deliveries *store.DeliveryPrune
	events     *store.EventPrune
	state      pass.StateTable
}

// New applies the defaults, validates cfg and returns a Service that runs
// its statements on db (a pool; each statement is its own transaction).
func New(db pass.DB, cfg Config, opts Options) (*Service, error) {
	kit, cfg, err := pass.Configure("prune", db, cfg, opts.Options)
	if err != nil {
		return nil, err
	}
	schema := store.MustSchema(cfg.Schema)
	s := &Service{
		kit: kit, cfg: cfg,
		deliveries: store.NewDeliveryPrune(schema),
		events:     store.NewEventPrune(schema),
		state:      stateFile.In(cfg.Schema),
	}
	s.Handler = pass.Scheduled("prune", &kit.Options, s.RunOnce)
	return s, nil
}

// RunOnce is one pass (the input says nothing it needs): batches of
// deliveries and of events, taken in turns so a large backlog of one kind
// never starves the other, until both are done or the budget ends; then
// one statement records the pass, on every way out (pass.Run.Finish). A
// statement the budget ended is a normal end (named in TimedOut, with
// More set); an error means the database failed, or ctx ended. Each batch
// commits on its own, so whatever the pass did stays done.
func (s *Service) RunOnce(ctx context.Context, _ json.RawMessage) (*Result, error) {
	run := s.kit.Begin(ctx)
	res := &Result{}
	err := s.work(ctx, run, res)
	if errors.Is(err, pass.ErrBudget) {
		res.More = true
	}
	err = run.Finish(ctx, err, func(ctx context.Context) error {
		return s.state.Record(ctx, run.Q, pgx.NamedArgs{"deliveries": res.DeletedDeliveries, "events": res.DeletedEvents,
			"events_after_us": recordedRetention(s.cfg.EventsAfter).Microseconds()})
	})
	return res, run.Close(&res.Summary, err)
}

// work runs the batches.
func (s *Service) work(ctx context.Context, run *pass.Run, res *Result) error {
	deliveries := newCursor(prunesDeliveries(s.cfg))
	events := newCursor(s.cfg.EventsAfter != pass.Off)
	if events.active {
		b, err := s.events.Bound(ctx, run.Q)
		if err != nil {
			return err
		}
		res.bound(b)
	}
	for deliveries.active || events.active {
		if !run.TimeLeft() {
			res.More = true
			return nil
		}
		if deliveries.active {
			b, err := s.deliveries.Prune(ctx, run.Q, store.DeliveryPruneParams{Cursor: deliveries.at, AckedAfter: s.cfg.AckedAfter, DeadAfter: s.cfg.DeadAfter, Limit: s.cfg.BatchLimit})
			if err != nil {
				return err
			}
			res.Batches++
			res.DeletedAcked += b.Acked
			res.DeletedDead += b.Dead
			res.DeletedDeliveries += b.Acked + b.Dead
			deliveries.move(b.Cursor, b.Done)
		}
		if events.active {
			b, err := s.events.Prune(ctx, run.Q, store.EventPruneParams{Cursor: events.at, OlderThan: s.cfg.EventsAfter, Limit: s.cfg.BatchLimit})
			if err != nil {
				return err
			}
			res.Batches++
			res.DeletedEvents += b.Deleted
			events.move(b.Cursor, b.Done)
		}
	}
	return nil
}

// cursor is where the next batch of one table starts.
type cursor struct {
	at     int64
	active bool // batches of this table remain in this pass
}

func newCursor(active bool) cursor { return cursor{active: active} }

// move takes a batch's answer. A cursor that did not move ends the table
// too: nothing left past it, whatever the batch said.
func (c *cursor) move(to int64, done bool) {
	c.active = !done && to > c.at
	c.at = max(c.at, to)
}

// prunesDeliveries: at least one kind of delivery has a retention.
func prunesDeliveries(c Config) bool { return c.AckedAfter != pass.Off || c.DeadAfter != pass.Off }

//go:embed prune_state.sql
var stateSQL embed.FS

// stateFile is prune_state's two statements, record and read.
var stateFile = pass.MustParseStateFile(stateSQL, "prune_state.sql")

// State is prune_state as an operator sees it (outboxkeeper status).
type State struct {
	pass.Recorded
	LastDeletedDeliveries  int64 `json:"last_deleted_deliveries"`
	LastDeletedEvents      int64 `json:"last_deleted_events"`
	DeletedDeliveriesTotal int64 `json:"deleted_deliveries_total"`
	DeletedEventsTotal     int64 `json:"deleted_events_total"`
}

// ReadState reads the one row of prune_state (the zero State when an
// operator deleted it: the next pass recreates it).
func ReadState(ctx context.Context, q store.Querier, schema store.Schema) (State, error) {
	var s State
	if err := stateFile.In(schema.Name()).ReadRecorded(ctx, q, &s.Recorded, &s.LastDeletedDeliveries, &s.LastDeletedEvents, &s.DeletedDeliveriesTotal, &s.DeletedEventsTotal); err != nil {
		return State{}, err
	}
	return s, nil
}

// recordedRetention is the event retention as prune_state records it for
// consumer_status and rewind_consumer: 0 when events are kept forever.
func recordedRetention(d time.Duration) time.Duration {
	if d == pass.Off {
		return 0
	}
	return d
}

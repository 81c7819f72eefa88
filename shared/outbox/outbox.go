// Package outbox is what applications import: publish events inside their
// own transactions, report the sequences a rollback burned, read the
// ordered stream, and drive deliveries. Its statements are in the tables'
// files (internal/store's events.sql, deliveries.sql, consumers.sql), with
// every other statement on those tables; it runs them here, into its own
// types.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/shared/report"
)

// Event is one row of the ordered stream; Placeholder() marks a sequence
// that was abandoned, which a consumer advances over.
type Event struct {
	Sequence int64
	// XID is the writer's transaction id; nil for placeholders.
	XID        *uint64
	Topic      string // empty for placeholders
	Payload    json.RawMessage
	Headers    json.RawMessage
	RecordedAt time.Time
	// FilledBy says which path wrote a placeholder ("fill", "compensate",
	// "operator"); empty for real events.
	FilledBy string
	// The routing columns, named as Debezium's outbox event router names
	// them; empty when the writer gave none (Routing), and for
	// placeholders.
	AggregateType string
	AggregateID   string
	EventType     string
}

// Placeholder says the row marks an abandoned sequence; consumers skip it.
func (e Event) Placeholder() bool { return e.FilledBy != "" }

// scan is the order of the columns of events.sql's read_events.
func (e *Event) scan(scan func(dest ...any) error) error {
	return scan(&e.Sequence, &e.XID, &e.Topic, &e.Payload, &e.Headers, &e.RecordedAt, &e.FilledBy,
		&e.AggregateType, &e.AggregateID, &e.EventType)
}

// RollbackReporter sends a rollback report; sqsreport.Reporter is the one
// for the compensate function's queue.
type RollbackReporter interface {
	Report(ctx context.Context, r report.Report) error
}

// DB is a pool or a connection: what the Outbox runs its own statements on.
type DB interface {
	store.Querier
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Options configure an Outbox.
type Options struct {
	// Schema holds the outbox tables; default "outbox".
	Schema string
	// Reporter receives the sequences of transactions run by InTx that do
	// not commit. Nil: nothing is reported and the fill function proves and
	// fills those gaps after its grace.
	Reporter RollbackReporter
	// Logger receives failed reports that cannot be returned (a panic is
	// being re-raised). Default slog.Default().
	Logger *slog.Logger
}

// Outbox is the library on pgx (a pool or a connection); SQLOutbox is the
// same on database/sql. Safe for concurrent use.
type Outbox struct {
	core
	db DB
}

// core is what both flavours share: the statements and what runs them
// outside any transaction of the application's.
type core struct {
	schema   store.Schema
	sql      statements
	reporter RollbackReporter
	log      *slog.Logger
	pool     executor
}

// New validates the options.
func New(db DB, opts Options) (*Outbox, error) {
	if db == nil {
		return nil, errors.New("outbox: nil DB")
	}
	c, err := newCore(opts, pgxExecutor{db})
	if err != nil {
		return nil, err
	}
	return &Outbox{core: c, db: db}, nil
}

func newCore(opts Options, pool executor) (core, error) {
	if opts.Schema == "" {
		opts.Schema = store.DefaultSchema
	}
	schema, err := store.ParseSchema(opts.Schema)
	if err != nil {
		return core{}, fmt.Errorf("outbox: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return core{
		schema:   schema,
		sql:      newStatements(schema),
		reporter: opts.Reporter,
		log:      opts.Logger,
		pool:     pool,
	}, nil
}

// Headers are an event's headers (events.headers, a JSON object). Given
// among Publish's payloads, a Headers value is not a payload: it is the
// headers of every event of that call (at most one per call).
//
//	tx.Publish(ctx, "order.placed", order, outbox.Headers{"trace_id": traceID})
type Headers map[string]any

// Routing sets the routing columns of a Publish call's events, the names
// Debezium's outbox event router gives them: what a relay groups by
// (AggregateID) and filters on (AggregateType). Given among Publish's
// payloads it is not a payload (at most one per call); an empty field is
// NULL.
//
//	tx.Publish(ctx, "order.placed", order, outbox.Routing{AggregateType: "order", AggregateID: id, EventType: "OrderPlaced"})
type Routing struct {
	AggregateType string
	AggregateID   string
	EventType     string
}

// Publish records one event per payload in tx, in one round trip, and
// returns their sequences in order. The transaction gets its xid before
// any sequence is allocated, and the xid is stored in each row (docs/design.md
// §3.1). A payload is marshalled to JSON unless it is already []byte or
// json.RawMessage; an outbox.Headers argument sets the events' headers, an
// outbox.Routing argument their routing columns.
//
// Use Tx.Publish (inside InTx, or on a transaction given to Wrap) instead
// when a rollback should be reported.
func (o *Outbox) Publish(ctx context.Context, tx pgx.Tx, topic string, payloads ...any) ([]int64, error) {
	if tx == nil {
		return nil, errNoTx
	}
	seqs, _, err := o.publish(ctx, pgxExecutor{tx}, topic, payloads)
	return seqs, err
}

// publishArgs is one Publish call's arguments, sorted out.
type publishArgs struct {
	docs    []string
	headers any // NULL without
	routing *Routing
}

func parsePublishArgs(topic string, args []any) (publishArgs, error) {
	var p publishArgs
	if topic == "" {
		return p, errors.New("outbox: publish: empty topic")
	}
	p.docs = make([]string, 0, len(args))
	for _, a := range args {
		switch a := a.(type) {
		case Headers:
			if a == nil {
				continue // no headers, as if none were given
			}
			if p.headers != nil {
				return p, fmt.Errorf("outbox: publish to %s: more than one outbox.Headers", topic)
			}
			doc, err := json.Marshal(a)
			if err != nil {
				return p, fmt.Errorf("outbox: publish to %s: headers: %w", topic, err)
			}
			p.headers = string(doc)
			continue
		case Routing:
			if p.routing != nil {
				return p, fmt.Errorf("outbox: publish to %s: more than one outbox.Routing", topic)
			}
			p.routing = &a
			continue
		}
		doc, err := toJSON(a)
		if err != nil {
			return p, fmt.Errorf("outbox: publish to %s: payload %d: %w", topic, len(p.docs), err)
		}
		p.docs = append(p.docs, string(doc))
	}
	if len(p.docs) == 0 {
		return p, errors.New("outbox: publish: no payloads")
	}
	return p, nil
}

// publish runs in the application's transaction ex: publish_batch, or
// with routing columns the plain INSERT, whose defaults take the xid
// before they allocate. Either way the rows' xid comes back with the
// sequences.
func (c *core) publish(ctx context.Context, ex executor, topic string, args []any) ([]int64, uint64, error) {
	p, err := parsePublishArgs(topic, args)
	if err != nil {
		return nil, 0, err
	}
	stmt := c.sql.publish
	named := pgx.StrictNamedArgs{"topic": topic, "payloads": p.docs, "headers": p.headers}
	if r := p.routing; r != nil {
		stmt = c.sql.publishRouted
		named["aggregate_type"], named["aggregate_id"], named["event_type"] = orNull(r.AggregateType), orNull(r.AggregateID), orNull(r.EventType)
	}
	seqs := make([]int64, 0, len(p.docs))
	var xid uint64
	err = ex.query(ctx, stmt, named, func(scan func(dest ...any) error) error {
		var s int64
		if err := scan(&s, &xid); err != nil {
			return err
		}
		seqs = append(seqs, s)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("publish to %s: %w", topic, err)
	}
	// The INSERT allocates in the payloads' order; its RETURNING order is
	// not promised.
	slices.Sort(seqs)
	return seqs, xid, nil
}

// orNull is s, or SQL NULL for "".
func orNull(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func toJSON(p any) ([]byte, error) {
	switch v := p.(type) {
	case json.RawMessage:
		if !json.Valid(v) {
			return nil, errors.New("not valid JSON")
		}
		return v, nil
	case []byte:
		if !json.Valid(v) {
			return nil, errors.New("not valid JSON")
		}
		return v, nil
	default:
		return json.Marshal(v)
	}
}

// ReadContiguous returns up to limit events after the cursor, in sequence
// order, never past the first missing sequence: that sequence's writer may
// still commit. Placeholders are included (Placeholder() is true) so the
// cursor moves over them.
func (o *Outbox) ReadContiguous(ctx context.Context, after int64, limit int) ([]Event, error) {
	return o.readContiguous(ctx, after, limit)
}

func (c *core) readContiguous(ctx context.Context, after int64, limit int) ([]Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := queryAll[Event](ctx, c.pool, c.sql.readEvents, pgx.StrictNamedArgs{"after": after, "max": limit})
	if err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, err)
	}
	return out, nil
}

// Head is the allocation head: the highest sequence handed to any writer.
func (o *Outbox) Head(ctx context.Context) (int64, error) { return o.head(ctx) }

func (c *core) head(ctx context.Context) (int64, error) {
	var h int64
	if err := queryOne(ctx, c.pool, c.sql.head, nil, &h); err != nil {
		return 0, fmt.Errorf("read allocation head: %w", err)
	}
	return h, nil
}

// errNoRows: a statement that answers one row answered none.
var errNoRows = errors.New("no rows")

// queryAll runs stmt through ex and scans every row it returns into a T.
func queryAll[T any, P interface {
	*T
	scan(scan func(dest ...any) error) error
}](ctx context.Context, ex executor, stmt string, args pgx.StrictNamedArgs) ([]T, error) {
	var out []T
	err := ex.query(ctx, stmt, args, func(scan func(dest ...any) error) error {
		var v T
		if err := P(&v).scan(scan); err != nil {
			return err
		}
		out = append(out, v)
		return nil
	})
	return out, err
}

// queryOne runs a statement that answers one row and scans it into dest.
func queryOne(ctx context.Context, ex executor, stmt string, args pgx.StrictNamedArgs, dest ...any) error {
	found := false
	err := ex.query(ctx, stmt, args, func(scan func(dest ...any) error) error {
		found = true
		return scan(dest...)
	})
	if err == nil && !found {
		err = errNoRows
	}
	return err
}

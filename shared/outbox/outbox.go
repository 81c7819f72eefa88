// Package outbox is what applications import: publish events inside their
// own transactions, report the sequences a rollback burned, read the
// ordered stream, and drive deliveries. SQL lives in shared/store.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
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
}

// Placeholder says the row marks an abandoned sequence; consumers skip it.
func (e Event) Placeholder() bool { return e.FilledBy != "" }

// Delivery is one row of the delivery outbox (State: pending, delivered,
// acked or dead). An alias of the SQL layer's row, so there is one
// definition to keep in step with the table.
type Delivery = store.Delivery

// ErrLostRace is matched (errors.Is) by every *StateConflictError.
var ErrLostRace = store.ErrLostRace

// StateConflictError is a lost compare-and-set on a delivery: the row was
// not in the state the transition starts from (another relay, an ack or
// the sweep moved it).
type StateConflictError = store.StateConflictError

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

// Outbox is safe for concurrent use.
type Outbox struct {
	db         DB
	schema     store.Schema
	events     *store.Events
	deliveries *store.Deliveries
	reporter   RollbackReporter
	log        *slog.Logger
}

// New validates the options.
func New(db DB, opts Options) (*Outbox, error) {
	if db == nil {
		return nil, errors.New("outbox: nil DB")
	}
	if opts.Schema == "" {
		opts.Schema = store.DefaultSchema
	}
	schema, err := store.ParseSchema(opts.Schema)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Outbox{
		db:         db,
		schema:     schema,
		events:     store.NewEvents(schema),
		deliveries: store.NewDeliveries(schema),
		reporter:   opts.Reporter,
		log:        opts.Logger,
	}, nil
}

// Headers are an event's headers (events.headers, a JSON object). Given
// among Publish's payloads, a Headers value is not a payload: it is the
// headers of every event of that call (at most one per call).
//
//	tx.Publish(ctx, "order.placed", order, outbox.Headers{"trace_id": traceID})
type Headers map[string]any

// Publish records one event per payload in tx, in one round trip, and
// returns their sequences in order. The transaction gets its xid before
// any sequence is allocated, and the xid is stored in each row (docs/design.md
// §3.1). A payload is marshalled to JSON unless it is already []byte or
// json.RawMessage; an outbox.Headers argument sets the events' headers.
//
// Use Tx.Publish (inside InTx, or on a transaction given to Wrap) instead
// when a rollback should be reported.
func (o *Outbox) Publish(ctx context.Context, tx pgx.Tx, topic string, payloads ...any) ([]int64, error) {
	seqs, _, err := o.publish(ctx, tx, topic, payloads)
	return seqs, err
}

func (o *Outbox) publish(ctx context.Context, q store.Querier, topic string, args []any) ([]int64, uint64, error) {
	if topic == "" {
		return nil, 0, errors.New("outbox: publish: empty topic")
	}
	var headers []byte
	docs := make([][]byte, 0, len(args))
	for _, a := range args {
		if h, ok := a.(Headers); ok {
			if h == nil {
				continue // no headers, as if none were given
			}
			if headers != nil {
				return nil, 0, fmt.Errorf("outbox: publish to %s: more than one outbox.Headers", topic)
			}
			doc, err := json.Marshal(h)
			if err != nil {
				return nil, 0, fmt.Errorf("outbox: publish to %s: headers: %w", topic, err)
			}
			headers = doc
			continue
		}
		doc, err := toJSON(a)
		if err != nil {
			return nil, 0, fmt.Errorf("outbox: publish to %s: payload %d: %w", topic, len(docs), err)
		}
		docs = append(docs, doc)
	}
	if len(docs) == 0 {
		return nil, 0, errors.New("outbox: publish: no payloads")
	}
	return o.events.Publish(ctx, q, topic, docs, headers)
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
	if limit <= 0 {
		return nil, nil
	}
	rows, err := o.events.ReadContiguous(ctx, o.db, after, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(rows))
	for i, r := range rows {
		out[i] = Event(r)
	}
	return out, nil
}

// Head is the allocation head: the highest sequence handed to any writer.
func (o *Outbox) Head(ctx context.Context) (int64, error) {
	return o.events.Head(ctx, o.db)
}

// NewDelivery is a row to enqueue.
type NewDelivery struct {
	Recipient string
	Kind      string
	TenantID  *string
	Payload   []byte
}

// Enqueue adds a pending delivery. Pass the application's transaction to
// enqueue atomically with its own writes, or nil to use the Outbox's DB.
func (o *Outbox) Enqueue(ctx context.Context, tx pgx.Tx, d NewDelivery) (int64, error) {
	return o.deliveries.Enqueue(ctx, o.querier(tx), d.Recipient, d.Kind, d.TenantID, d.Payload)
}

// ClaimPending locks up to limit pending rows for tx (FOR UPDATE SKIP
// LOCKED): concurrent relays claim disjoint rows.
func (o *Outbox) ClaimPending(ctx context.Context, tx pgx.Tx, limit int) ([]Delivery, error) {
	if tx == nil {
		return nil, errors.New("outbox: ClaimPending needs a transaction to hold its row locks")
	}
	return o.deliveries.ClaimPending(ctx, tx, limit)
}

// MarkDelivered moves a delivery pending→delivered (attempts+1,
// delivered_at now). A lost race returns a *StateConflictError.
func (o *Outbox) MarkDelivered(ctx context.Context, tx pgx.Tx, id int64) error {
	return o.deliveries.MarkDelivered(ctx, o.querier(tx), id)
}

// Ack moves a delivery delivered→acked. A lost race (the sweep reset it,
// or it was already acked) returns a *StateConflictError.
func (o *Outbox) Ack(ctx context.Context, tx pgx.Tx, id int64) error {
	return o.deliveries.Ack(ctx, o.querier(tx), id)
}

func (o *Outbox) querier(tx pgx.Tx) store.Querier {
	if tx == nil {
		return o.db
	}
	return tx
}

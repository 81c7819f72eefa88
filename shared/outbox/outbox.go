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
	db       DB
	schema   store.Schema
	sql      statements
	reporter RollbackReporter
	log      *slog.Logger
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
		db:       db,
		schema:   schema,
		sql:      newStatements(schema),
		reporter: opts.Reporter,
		log:      opts.Logger,
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
	var headers any // NULL without
	docs := make([]string, 0, len(args))
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
			headers = string(doc)
			continue
		}
		doc, err := toJSON(a)
		if err != nil {
			return nil, 0, fmt.Errorf("outbox: publish to %s: payload %d: %w", topic, len(docs), err)
		}
		docs = append(docs, string(doc))
	}
	if len(docs) == 0 {
		return nil, 0, errors.New("outbox: publish: no payloads")
	}
	type published struct {
		Sequence int64
		XID      uint64
	}
	named := pgx.StrictNamedArgs{"topic": topic, "payloads": docs, "headers": headers}
	got, err := store.Rows(ctx, q, o.sql.publish, named, pgx.RowToStructByPos[published])
	if err != nil {
		return nil, 0, fmt.Errorf("publish to %s: %w", topic, err)
	}
	seqs := make([]int64, len(got))
	var xid uint64
	for i, p := range got {
		seqs[i], xid = p.Sequence, p.XID
	}
	return seqs, xid, nil
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
	out, err := store.Rows(ctx, o.db, o.sql.readEvents, pgx.StrictNamedArgs{"after": after, "max": limit}, pgx.RowToStructByPos[Event])
	if err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, err)
	}
	return out, nil
}

// Head is the allocation head: the highest sequence handed to any writer.
func (o *Outbox) Head(ctx context.Context) (int64, error) {
	var h int64
	if err := o.db.QueryRow(ctx, o.sql.head).Scan(&h); err != nil {
		return 0, fmt.Errorf("read allocation head: %w", err)
	}
	return h, nil
}

package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Who wrote a placeholder (events.filled_by).
const (
	FilledByFill       = "fill"
	FilledByCompensate = "compensate"
	// FilledByOperator: written by `outboxkeeper skip-stall`, neither
	// proven abandoned nor reported by its writer, but skipped by a
	// person, on the record (<schema>.stall_skips, stall_skips.sql).
	FilledByOperator = "operator"
)

// MaxRead is the most events one read_events call returns, whatever it is
// asked for: one call is always a bounded amount of work.
const MaxRead = 10000

// Event is one row of <schema>.events as read_events returns it, for the
// functions that read the stream (the relay); applications read into
// shared/outbox's own Event.
type Event struct {
	Sequence   int64
	XID        *uint64 // nil for placeholders
	Topic      string  // empty for placeholders
	Payload    json.RawMessage
	Headers    json.RawMessage
	RecordedAt time.Time
	FilledBy   string // empty for real events
	// The routing columns (Debezium's outbox event router's names),
	// empty when the writer gave none and for placeholders: what a relay
	// groups by (AggregateID) and filters on (AggregateType).
	AggregateType string
	AggregateID   string
	EventType     string
}

// Placeholder says the row marks an abandoned sequence; consumers skip it.
func (e Event) Placeholder() bool { return e.FilledBy != "" }

// Events runs the statements of events.sql that the functions send: the
// fill's, compensate's and the relay's.
type Events struct {
	readEvents         string
	presentAfter       string
	head               string
	insertPlaceholders string
	insertMissing      string
}

// NewEvents renders the statements for schema.
func NewEvents(schema Schema) *Events {
	n := schema.Name()
	return &Events{
		readEvents:         EventsSQL.Statement("read_events", n),
		presentAfter:       EventsSQL.Statement("present_after", n),
		head:               EventsSQL.Statement("allocation_head", n),
		insertPlaceholders: EventsSQL.Statement("insert_placeholders", n),
		insertMissing:      EventsSQL.Statement("insert_missing", n),
	}
}

// ReadContiguous returns up to limit events after the cursor, in sequence
// order, through read_events: never past the first missing sequence whose
// writer may still commit (docs/design.md §2). Placeholders are included,
// so a position moves over them.
func (e *Events) ReadContiguous(ctx context.Context, q Querier, after int64, limit int) ([]Event, error) {
	if limit <= 0 {
		return nil, nil
	}
	out, err := Rows(ctx, q, e.readEvents, pgx.StrictNamedArgs{"after": after, "max": limit}, pgx.RowToStructByPos[Event])
	if err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, err)
	}
	return out, nil
}

// PresentAfter returns the sequences present after `after`, at most limit of
// them, in index order: one page of the fill's forward scan.
func (e *Events) PresentAfter(ctx context.Context, q Querier, after int64, limit int) ([]int64, error) {
	seqs, err := Rows(ctx, q, e.presentAfter, pgx.StrictNamedArgs{"after": after, "page": limit}, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("read page after %d: %w", after, err)
	}
	return seqs, nil
}

// Head is the allocation head: the last sequence handed to any writer, 0
// before the first.
func (e *Events) Head(ctx context.Context, q Querier) (int64, error) {
	var h int64
	if err := q.QueryRow(ctx, e.head).Scan(&h); err != nil {
		return 0, fmt.Errorf("read allocation head: %w", err)
	}
	return h, nil
}

// Written is what one placeholder insert wrote: how many, and the range
// they span (Min and Max are 0 when none was written).
type Written struct {
	N        int64
	Min, Max int64
}

// InsertPlaceholders writes a placeholder for each sequence that is still
// missing and notifies the range it wrote on <schema>_events, in one
// statement. The caller has proved every one of them abandoned (docs/design.md §3).
func (e *Events) InsertPlaceholders(ctx context.Context, q Querier, sequences []int64, filledBy string) (Written, error) {
	return e.insert(ctx, q, e.insertPlaceholders, sequences, filledBy)
}

// InsertMissing is InsertPlaceholders for sequences the caller has just
// read as missing, the fill's case: a plain insert, cheaper than one with
// ON CONFLICT. When one of them turns out present after all (compensate
// wrote it since the read: SQLSTATE 23505, nothing was written) it sends
// InsertPlaceholders instead, which keeps every present row and writes
// the rest. Either way no row is ever overwritten (docs/design.md §3.5).
func (e *Events) InsertMissing(ctx context.Context, q Querier, sequences []int64, filledBy string) (Written, error) {
	w, err := e.insert(ctx, q, e.insertMissing, sequences, filledBy)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return e.InsertPlaceholders(ctx, q, sequences, filledBy)
	}
	return w, err
}

func (e *Events) insert(ctx context.Context, q Querier, sql string, sequences []int64, filledBy string) (Written, error) {
	var w Written
	if len(sequences) == 0 {
		return w, nil
	}
	var notified bool
	err := q.QueryRow(ctx, sql, pgx.StrictNamedArgs{"sequences": sequences, "filled_by": filledBy}).Scan(&w.N, &w.Min, &w.Max, &notified)
	if err != nil {
		return Written{}, fmt.Errorf("insert %d placeholders: %w", len(sequences), err)
	}
	return w, nil
}

// EventPrune runs the prune pass's statements of events.sql
// (docs/design.md §6b): what bounds it, and set-based deletes of the
// oldest events.
type EventPrune struct {
	bound  string
	delete string
}

// NewEventPrune renders the prune statements for schema.
func NewEventPrune(schema Schema) *EventPrune {
	return &EventPrune{
		bound:  EventsSQL.Statement("prune_bound", schema.Name()),
		delete: EventsSQL.Statement("prune", schema.Name()),
	}
}

// PruneBound is what bounds an event prune pass.
type PruneBound struct {
	Watermark int64
	// Slowest is the registered consumer with the lowest position, nil
	// when none is registered.
	Slowest *ConsumerPosition
}

// Upto is the highest sequence prune may delete.
func (b PruneBound) Upto() int64 {
	if b.Slowest != nil && b.Slowest.Position < b.Watermark {
		return b.Slowest.Position
	}
	return b.Watermark
}

// Bound reads the watermark and the slowest consumer.
func (p *EventPrune) Bound(ctx context.Context, q Querier) (PruneBound, error) {
	var b PruneBound
	var name *string
	var position *int64
	if err := q.QueryRow(ctx, p.bound).Scan(&b.Watermark, &name, &position); err != nil {
		return PruneBound{}, fmt.Errorf("read the prune bound: %w", err)
	}
	if name != nil && position != nil {
		b.Slowest = &ConsumerPosition{Name: *name, Position: *position}
	}
	return b, nil
}

// EventPruneParams is one event prune batch.
type EventPruneParams struct {
	// Cursor is where the batch starts (exclusive).
	Cursor int64
	// OlderThan is the retention: events recorded longer ago go.
	OlderThan time.Duration
	// Limit is the most sequences the batch covers.
	Limit int
}

// PruneBatch is what one delete statement did.
type PruneBatch struct {
	Deleted int64
	// Cursor is where the next batch starts (exclusive).
	Cursor int64
	// Done says nothing more can go now: the prefix ended at a row too
	// young, or at the bound.
	Done bool
}

// Prune deletes up to p.Limit events after p.Cursor recorded longer than
// p.OlderThan ago, in sequence order, never above the fill watermark nor
// the slowest registered consumer, in one statement.
func (ep *EventPrune) Prune(ctx context.Context, q Querier, p EventPruneParams) (PruneBatch, error) {
	var b PruneBatch
	args := pgx.StrictNamedArgs{"cursor": p.Cursor, "batch": p.Limit, "older_than_us": p.OlderThan.Microseconds()}
	if err := q.QueryRow(ctx, ep.delete, args).Scan(&b.Deleted, &b.Cursor, &b.Done); err != nil {
		return PruneBatch{}, fmt.Errorf("prune events after %d (limit %d): %w", p.Cursor, p.Limit, err)
	}
	return b, nil
}

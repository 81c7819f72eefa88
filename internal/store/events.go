package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Who wrote a placeholder (events.filled_by).
const (
	FilledByFill       = "fill"
	FilledByCompensate = "compensate"
)

// Event is one row of <schema>.events.
type Event struct {
	Sequence   int64
	XID        *uint64 // nil for placeholders
	Topic      string  // empty for placeholders
	Payload    json.RawMessage
	Headers    json.RawMessage
	RecordedAt time.Time
	FilledBy   string // empty for real events
}

// Placeholder says the row marks an abandoned sequence; consumers skip it.
func (e Event) Placeholder() bool { return e.FilledBy != "" }

// Events is the SQL for <schema>.events and its sequence.
type Events struct {
	schema Schema

	publish        string
	readContiguous string
	readPage       string
	head           string
	lowest         string
	fill           string
}

// NewEvents renders the statements for schema.
func NewEvents(schema Schema) *Events {
	t := schema.Table("events")
	return &Events{
		schema: schema,
		// publish_batch takes the xid before it allocates (docs/design.md §3.1).
		// The xid is read back in the same statement (publish_batch has
		// assigned it by then) so the caller can report a rollback exactly.
		publish: `SELECT s, pg_current_xact_id() FROM ` + schema.Table("publish_batch") + `($1, $2::jsonb[], $3) AS s`,
		// Rows after the cursor up to, never past, the first missing
		// sequence: in a contiguous run sequence - row_number() is constant,
		// so the first row where it drifts is the first gap.
		readContiguous: `SELECT sequence, xid, coalesce(topic, ''), payload, headers, recorded_at, coalesce(filled_by, '')
			FROM (SELECT *, sequence - row_number() OVER (ORDER BY sequence) AS drift
			      FROM (SELECT * FROM ` + t + ` WHERE sequence > $1 ORDER BY sequence LIMIT $2) page) numbered
			WHERE drift = $1 ORDER BY sequence`,
		readPage: `SELECT sequence FROM ` + t + ` WHERE sequence > $1 ORDER BY sequence LIMIT $2`,
		head:     `SELECT ` + schema.Table("allocation_head") + `()`,
		lowest:   `SELECT coalesce(min(sequence), 0) FROM ` + t,
		// docs/design.md §3.5: never overwrite. DO NOTHING keeps a committed row (or
		// another path's placeholder) and returns only what this call wrote.
		// The notification of the range written rides in the same statement
		// (§2), so it is sent exactly when the rows commit: a connection
		// lost after the insert cannot drop it, and it costs no round trip.
		// CASE, unlike AND, guarantees nothing is notified when nothing
		// was written. The payload is byte for byte §2's.
		// It answers with what it wrote as a count and a range, not the
		// sequences themselves: a thousand-row batch costs no array to
		// build, sort and send back.
		fill: `WITH wrote AS (
				INSERT INTO ` + t + ` (sequence, filled_by)
				SELECT s, $2 FROM unnest($1::bigint[]) AS s
				ON CONFLICT (sequence) DO NOTHING
				RETURNING sequence)
			SELECT count(*), coalesce(min(sequence), 0), coalesce(max(sequence), 0),
				CASE WHEN count(*) > 0
					THEN pg_notify($3, '{"min":' || min(sequence) || ',"max":' || max(sequence) || '}') IS NOT NULL
					ELSE false END
			FROM wrote`,
	}
}

// Publish allocates one sequence per payload in tx and inserts the rows, in
// one statement, returning the sequences in order and the transaction's xid.
// The xid is assigned before any allocation (docs/design.md §3.1).
func (e *Events) Publish(ctx context.Context, tx Querier, topic string, payloads [][]byte, headers []byte) ([]int64, uint64, error) {
	docs := make([]string, len(payloads))
	for i, p := range payloads {
		docs[i] = string(p)
	}
	var hdr any
	if headers != nil {
		hdr = string(headers)
	}
	rows, err := tx.Query(ctx, e.publish, topic, docs, hdr)
	if err != nil {
		return nil, 0, fmt.Errorf("publish to %s: %w", topic, err)
	}
	type published struct {
		Sequence int64
		XID      uint64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[published])
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

// ReadContiguous returns up to limit events after the cursor, in order,
// stopping before the first missing sequence.
func (e *Events) ReadContiguous(ctx context.Context, q Querier, after int64, limit int) ([]Event, error) {
	rows, err := q.Query(ctx, e.readContiguous, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Event])
	if err != nil {
		return nil, fmt.Errorf("read events after %d: %w", after, err)
	}
	return out, nil
}

// PresentAfter returns the sequences present after `after`, at most limit of
// them, in index order: one page of the fill's forward scan.
func (e *Events) PresentAfter(ctx context.Context, q Querier, after int64, limit int) ([]int64, error) {
	rows, err := q.Query(ctx, e.readPage, after, limit)
	if err != nil {
		return nil, fmt.Errorf("read page after %d: %w", after, err)
	}
	seqs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
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

// Lowest is the lowest present sequence, 0 for an empty table.
func (e *Events) Lowest(ctx context.Context, q Querier) (int64, error) {
	var l int64
	if err := q.QueryRow(ctx, e.lowest).Scan(&l); err != nil {
		return 0, fmt.Errorf("read lowest sequence: %w", err)
	}
	return l, nil
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
	var w Written
	if len(sequences) == 0 {
		return w, nil
	}
	var notified bool
	if err := q.QueryRow(ctx, e.fill, sequences, filledBy, e.schema.EventsChannel()).Scan(&w.N, &w.Min, &w.Max, &notified); err != nil {
		return Written{}, fmt.Errorf("insert %d placeholders: %w", len(sequences), err)
	}
	return w, nil
}

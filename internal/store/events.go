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
	// person, on the record (<schema>.stall_skips, skips.go).
	FilledByOperator = "operator"
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
	fillMissing    string
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
		// <schema>.read_events (shared/migrations/0007) is the read side for
		// every language: rows after the cursor up to, never past, the
		// first missing sequence above the fill watermark: one index
		// range scan, its plan kept by the server connection (0012).
		readContiguous: `SELECT sequence, xid, coalesce(topic, ''), payload, headers, recorded_at, coalesce(filled_by, '')
			FROM ` + schema.Table("read_events") + `($1, $2)`,
		// <schema>.present_after (shared/migrations/0015) is one range scan of the
		// primary key from the cursor, whatever the statistics: as a plain
		// statement the planner could read and sort the whole table for a
		// page it took for most of it.
		readPage: `SELECT s FROM ` + schema.Table("present_after") + `($1::bigint, $2::integer) AS s`,
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
		// Only above the fill watermark: every sequence at or below it is
		// present or was pruned (§6b), and a placeholder re-created in
		// pruned history (a report redriven from the DLQ weeks later, or
		// a forged one) would be the youngest row of the oldest prefix,
		// which stops event retention there for a whole retention period.
		// Such a sequence counts as already present.
		fill: placeholderInsert(schema, `ON CONFLICT (sequence) DO NOTHING`),
		// fillMissing is fill without ON CONFLICT, for sequences the
		// caller has just read as missing (InsertMissing). A speculative
		// insert (what ON CONFLICT does) costs PostgreSQL about half as
		// much again per row as a plain one. A plain insert still never
		// overwrites: the primary key refuses the whole statement instead
		// (23505), and nothing is written.
		fillMissing: placeholderInsert(schema, ``),
	}
}

// placeholderInsert is the placeholder insert of schema's events, above
// its fill watermark, with conflict as its ON CONFLICT clause (or none).
func placeholderInsert(schema Schema, conflict string) string {
	return `WITH wrote AS (
				INSERT INTO ` + schema.Table("events") + ` (sequence, filled_by)
				SELECT s, $2 FROM unnest($1::bigint[]) AS s
				WHERE s > (SELECT coalesce(max(watermark), 0) FROM ` + schema.Table("fill_state") + `)
				` + conflict + `
				RETURNING sequence)
			SELECT count(*), coalesce(min(sequence), 0), coalesce(max(sequence), 0),
				CASE WHEN count(*) > 0
					THEN pg_notify($3, '{"min":' || min(sequence) || ',"max":' || max(sequence) || '}') IS NOT NULL
					ELSE false END
			FROM wrote`
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

// InsertMissing is InsertPlaceholders for sequences the caller has just
// read as missing, the fill's case: it inserts them without ON CONFLICT,
// which is cheaper, and when one of them turns out present after all
// (compensate wrote it since the read, SQLSTATE 23505: the primary key
// refused the whole statement, nothing was written) it sends
// InsertPlaceholders instead, which keeps every present row and writes the
// rest. Either way no row is ever overwritten (docs/design.md §3.5). The
// second statement is the price of a race that needs another writer of
// placeholders within the moment between the page read and the insert.
func (e *Events) InsertMissing(ctx context.Context, q Querier, sequences []int64, filledBy string) (Written, error) {
	var w Written
	if len(sequences) == 0 {
		return w, nil
	}
	var notified bool
	err := q.QueryRow(ctx, e.fillMissing, sequences, filledBy, e.schema.EventsChannel()).Scan(&w.N, &w.Min, &w.Max, &notified)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return e.InsertPlaceholders(ctx, q, sequences, filledBy)
	}
	if err != nil {
		return Written{}, fmt.Errorf("insert %d placeholders: %w", len(sequences), err)
	}
	return w, nil
}

// MaxRead is the most events one read_events call returns, whatever it
// is asked for: one call is always a bounded amount of work.
const MaxRead = 10000

// EventPrune is the prune pass's SQL for <schema>.events (docs/design.md
// §6b): what bounds it, and set-based deletes of the oldest events.
type EventPrune struct {
	bound  string
	delete string
}

// PruneEventsTag starts the delete statement's text, so it can be told
// apart in pg_stat_activity and pg_stat_statements.
const PruneEventsTag = "/* outboxkeeper prune_events */"

// NewEventPrune renders the prune statements for schema.
func NewEventPrune(schema Schema) *EventPrune {
	t := schema.Table("events")
	// upto is the highest sequence prune may ever delete: the fill
	// watermark (above it a missing sequence may still be committed, and
	// read_events would stop before it rather than pass over it) and the
	// slowest registered consumer's position (pruning never takes an event
	// someone still reads). An unstarted fill has watermark 0: nothing.
	upto := `least(
			coalesce((SELECT max(watermark) FROM ` + schema.Table("fill_state") + `), 0),
			coalesce((SELECT min(position) FROM ` + schema.Table("consumers") + `), 9223372036854775807))`
	return &EventPrune{
		// What bounds a pass, for its response: the watermark and the
		// slowest consumer (the first by position, then name).
		bound: `SELECT coalesce((SELECT max(watermark) FROM ` + schema.Table("fill_state") + `), 0),
				c.name, c.position
			FROM (SELECT 1) one
			LEFT JOIN LATERAL (SELECT name, position FROM ` + schema.Table("consumers") + `
				ORDER BY position, name LIMIT 1) c ON true`,
		// One batch, one statement, its own transaction:
		//  - upto is read here, in the delete's own snapshot, not once per
		//    pass: a position or a watermark read earlier could only be
		//    lower (both only grow), but reading it here costs nothing
		//    and a consumer registered since the pass began is honoured.
		//  - r: the batch's range, from the first sequence after the
		//    cursor (one probe of the primary key) to $2 sequences on, at
		//    most upto. At or below the watermark every sequence above the
		//    pruned prefix is present (placeholders fill the gaps), so the
		//    range holds $2 rows.
		//  - gone: the delete of the range's rows recorded longer than $3
		//    ago: one range scan of the primary key. Reading the page
		//    first and deleting its rows again by sequence (= ANY of the
		//    page) read every row twice and descended the index once per
		//    row: a batch cost several times a bare DELETE of the same
		//    rows (BENCHMARKS.md, row 6).
		//  - done: the range reached upto, or it kept a row recorded too
		//    recently (asked only then: the rows gone are all the range
		//    when none was). recorded_at grows with the sequence (up to
		//    the length of a transaction), so the pass stops there rather
		//    than read the whole young tail of the table; a later pass
		//    moves on. Within the range every row past retention goes,
		//    also one after a younger row.
		//  No FOR UPDATE SKIP LOCKED here (unlike the deliveries' prune
		//  before): locking a row needs an UPDATE right, which the
		//  maintainer role has on no column of events, and granting one
		//  would let it rewrite events. An overlapping pass deleting the
		//  same rows waits for that one statement, then finds them gone
		//  and counts nothing: each row still counts once. Nothing else
		//  locks rows at or below the watermark.
		// It answers with the count deleted, the last sequence the range
		// covered (the next batch's cursor) and whether the pass is done.
		delete: PruneEventsTag + `
			WITH r AS MATERIALIZED (
				SELECT first, least(first + $2 - 1, upto) AS last, upto
				FROM (SELECT (SELECT min(sequence) FROM ` + t + ` WHERE sequence > $1) AS first,
					` + upto + ` AS upto) b
			), gone AS (
				DELETE FROM ` + t + ` AS e USING r
				WHERE e.sequence >= r.first AND e.sequence <= r.last
				  AND e.recorded_at < now() - $3::bigint * interval '1 microsecond'
				RETURNING e.sequence
			), counted AS (
				SELECT count(*) AS n FROM gone
			)
			SELECT counted.n,
				CASE WHEN r.first IS NULL OR r.last < r.first THEN $1 ELSE r.last END,
				CASE
					WHEN r.first IS NULL OR r.last < r.first OR r.last >= r.upto THEN true
					WHEN counted.n = r.last - r.first + 1 THEN false
					ELSE EXISTS (SELECT 1 FROM ` + t + ` AS y
						WHERE y.sequence >= r.first AND y.sequence <= r.last
						  AND y.recorded_at >= now() - $3::bigint * interval '1 microsecond')
				END
			FROM counted, r`,
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

// PruneBatch is what one delete statement did.
type PruneBatch struct {
	Deleted int64
	// Cursor is where the next batch starts (exclusive).
	Cursor int64
	// Done says nothing more can go now: the prefix ended at a row too
	// young, or at the bound.
	Done bool
}

// Prune deletes up to limit events after cursor recorded longer than
// olderThan ago, in sequence order, never above the fill watermark nor
// the slowest registered consumer, in one statement.
func (p *EventPrune) Prune(ctx context.Context, q Querier, cursor int64, olderThan time.Duration, limit int) (PruneBatch, error) {
	var b PruneBatch
	if err := q.QueryRow(ctx, p.delete, cursor, limit, olderThan.Microseconds()).Scan(&b.Deleted, &b.Cursor, &b.Done); err != nil {
		return PruneBatch{}, fmt.Errorf("prune events after %d (limit %d): %w", cursor, limit, err)
	}
	return b, nil
}

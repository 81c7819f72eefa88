package pass

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// StateTable is a pass's own one-row table (sweep_state, prune_state): the
// statement that records a pass in it and the one that reads it,
// rendered once.
type StateTable struct {
	name, record, read string
}

// NewStateTable is the table's two statements, rendered by the pass from
// its .sql file; table names the table in errors.
func NewStateTable(table, record, read string) StateTable {
	return StateTable{name: table, record: record, read: read}
}

// Record adds one pass, with args, to the table.
func (t StateTable) Record(ctx context.Context, q store.Querier, args pgx.NamedArgs) error {
	if _, err := q.Exec(ctx, t.record, args); err != nil {
		return fmt.Errorf("record the pass in %s: %w", t.name, err)
	}
	return nil
}

// Read reads the row into dest; a missing row (an operator deleted it, and
// the next pass recreates it) leaves dest as it is.
func (t StateTable) Read(ctx context.Context, q store.Querier, dest ...any) error {
	if err := q.QueryRow(ctx, t.read).Scan(dest...); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("read %s: %w", t.name, err)
	}
	return nil
}

// Recorded is what every pass's one-row table says of its passes; each
// pass's State embeds it (its JSON fields stand beside the pass's own).
type Recorded struct {
	Passes int64 `json:"passes"`
	// LastPassAt is when the last pass ended, nil before the first.
	LastPassAt *time.Time `json:"last_pass_at"`
}

// ReadRecorded is Read of a pass's own one-row table: its first two
// columns, passes and last_pass_at, into r, the pass's own into fields.
func (t StateTable) ReadRecorded(ctx context.Context, q store.Querier, r *Recorded, fields ...any) error {
	return t.Read(ctx, q, append([]any{&r.Passes, &r.LastPassAt}, fields...)...)
}

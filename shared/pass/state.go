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

func (r *Recorded) recorded() *Recorded { return r }

// ReadState reads t's row into a zero S (a pass's State, embedding
// Recorded): the read statement's columns are passes, last_pass_at, then
// those fields lists, in order. A missing row is the zero S (the next pass
// recreates it).
func ReadState[S any, P interface {
	*S
	recorded() *Recorded
}](ctx context.Context, q store.Querier, t StateTable, fields func(P) []any) (S, error) {
	var s S
	r := P(&s).recorded()
	if err := t.Read(ctx, q, append([]any{&r.Passes, &r.LastPassAt}, fields(&s)...)...); err != nil {
		var zero S
		return zero, err
	}
	return s, nil
}

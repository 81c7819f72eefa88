package pass

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// StateTable is a pass's own one-row table (sweep_state, prune_state): the
// statement that records a pass in it and the one that reads it, named
// record and read in its .sql file, rendered once.
type StateTable struct {
	name, record, read string
}

// NewStateTable renders file's record and read for schema; table names
// the table in errors.
func NewStateTable(file sqltext.File, table, schema string) StateTable {
	return StateTable{name: table, record: file.Statement("record", schema), read: file.Statement("read", schema)}
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

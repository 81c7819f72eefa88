package pass

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// StateTable is a pass's own one-row table (sweep_state, prune_state): the
// statement that records a pass in it and the one that reads it,
// rendered once.
type StateTable struct {
	name, record, read string
}

// StateFile is a pass's <table>.sql for its one-row table, parsed once:
// its statements "record" and "read" make the StateTable in any schema.
type StateFile struct {
	table string
	file  sqltext.File
}

// MustParseStateFile parses name (prune_state.sql: the table is
// prune_state) from fsys, and panics, as sqltext.MustParse does, when it
// cannot: the file is embedded, so that is a build's mistake.
func MustParseStateFile(fsys fs.FS, name string) StateFile {
	return StateFile{table: strings.TrimSuffix(name, ".sql"), file: sqltext.MustParse(fsys, name)}
}

// In is the table's StateTable in schema.
func (f StateFile) In(schema string) StateTable {
	return StateTable{name: f.table, record: f.file.Statement("record", schema), read: f.file.Statement("read", schema)}
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

// Package store holds the statements on the outbox's tables, one .sql file
// a table, whoever runs them: every statement that touches `events` is in
// events.sql, every one that touches `deliveries` in deliveries.sql, and so
// on. The Go beside each file runs the statements of the passes and the
// CLI; shared/outbox runs the application's from the same files, into its
// own types. The functions' state tables keep their statements beside the
// pass that owns them.
package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/sqltext"
)

//go:embed *.sql
var files embed.FS

// The tables' statements, one file a table, each rendered for a schema on
// its first lookup and kept (sqltext.File.Statement), so the code looks a
// statement up where it runs it.
var (
	EventsSQL     = sqltext.MustParse(files, "events.sql")
	DeliveriesSQL = sqltext.MustParse(files, "deliveries.sql")
	ConsumersSQL  = sqltext.MustParse(files, "consumers.sql")
	StallSkipsSQL = sqltext.MustParse(files, "stall_skips.sql")
	// ConsumerChangesSQL: the consumers' status, rewind and retire.
	ConsumerChangesSQL = sqltext.MustParse(files, "consumer_changes.sql")
)

// Querier is what a statement needs: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Rows runs sql and collects every row it returns with scan: a statement of
// a table's file, its arguments named.
func Rows[T any](ctx context.Context, q Querier, sql string, args pgx.StrictNamedArgs, scan pgx.RowToFunc[T]) ([]T, error) {
	rows, err := q.Query(ctx, sql, args)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scan)
}

// DefaultSchema is the outbox schema when OUTBOX_SCHEMA is not set.
const DefaultSchema = "outbox"

// Schema is a validated outbox schema name.
type Schema struct{ name string }

// identifier is a plain, unquoted-safe PostgreSQL identifier. Anything else
// is refused rather than escaped: a schema name is configuration, not data.
// At most MaxSchemaLength bytes, not PostgreSQL's 63: the NOTIFY channels
// are the name plus "_deliveries" (11 bytes), and a channel name must fit
// in 63 bytes too, or every placeholder insert and the sweep's wake-up
// would fail ("channel name too long").
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,51}$`)

// MaxSchemaLength is the longest outbox schema name, in bytes.
const MaxSchemaLength = 52

// ValidSchema reports why name cannot be an outbox schema, or nil.
func ValidSchema(name string) error {
	if !identifier.MatchString(name) {
		return errors.New("must be a plain lower-case identifier: a letter or _, then letters, digits or _, at most 52 bytes (the NOTIFY channels add _deliveries)")
	}
	if strings.HasPrefix(name, "pg_") {
		return errors.New("names starting with pg_ are reserved by PostgreSQL")
	}
	return nil
}

// ParseSchema validates name as a plain identifier. It is always quoted
// where it reaches SQL all the same.
func ParseSchema(name string) (Schema, error) {
	if err := ValidSchema(name); err != nil {
		return Schema{}, fmt.Errorf("schema %q: %w", name, err)
	}
	return Schema{name: name}, nil
}

// MustSchema is ParseSchema for constants and tests.
func MustSchema(name string) Schema {
	s, err := ParseSchema(name)
	if err != nil {
		panic(err)
	}
	return s
}

// Name is the bare schema name.
func (s Schema) Name() string { return s.name }

// Table returns the quoted, schema-qualified name of a table or function.
// Always quoted, so a name that is also a keyword stays safe.
func (s Schema) Table(name string) string { return pgx.Identifier{s.name, name}.Sanitize() }

// EventsChannel is the NOTIFY channel for filled ranges.
func (s Schema) EventsChannel() string { return s.name + "_events" }

// DeliveriesChannel is the NOTIFY channel that wakes the relay.
func (s Schema) DeliveriesChannel() string { return s.name + "_deliveries" }

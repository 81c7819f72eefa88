// Package store holds the SQL for the outbox's tables: one file a table,
// so a reader finds every statement that touches `events` in events.go and
// every one that touches `deliveries` in deliveries.go. The functions' own
// state tables keep their SQL beside the function that owns them.
package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/shared/config"
)

// Querier is what a statement needs: a pool, a connection or a transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Schema is a validated outbox schema name.
type Schema struct{ name string }

// ParseSchema validates name as a plain identifier (DESIGN §2).
func ParseSchema(name string) (Schema, error) {
	if err := config.ValidSchema(name); err != nil {
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

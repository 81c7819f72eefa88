package store

import (
	"context"
	"fmt"
)

// ConsumerPosition is one row of <schema>.consumers: the last sequence a
// consumer has taken.
type ConsumerPosition struct {
	Name     string
	Position int64
}

// Consumers is the SQL for <schema>.consumers. Positions are written only
// through <schema>.commit_position (shared/migrations/0007), which never moves one
// backwards and refuses one above the allocation head.
type Consumers struct {
	commit string
}

// NewConsumers renders the statements for schema.
func NewConsumers(schema Schema) *Consumers {
	return &Consumers{
		commit: `SELECT ` + schema.Table("commit_position") + `($1, $2)`,
	}
}

// Commit records position for consumer name (registering it) and returns
// the position stored, which is higher than position when a later one
// was committed already.
func (c *Consumers) Commit(ctx context.Context, q Querier, name string, position int64) (int64, error) {
	var stored int64
	if err := q.QueryRow(ctx, c.commit, name, position).Scan(&stored); err != nil {
		return 0, fmt.Errorf("commit position %d for consumer %q: %w", position, name, err)
	}
	return stored, nil
}

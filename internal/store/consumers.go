package store

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"
)

// MaxConsumerName is the longest consumer name, in bytes, that
// commit_position takes (shared/migrations/0016): the name is the consumers
// table's primary key, and a btree entry must fit a third of a page.
const MaxConsumerName = 200

// ValidConsumerName says why commit_position would refuse name, or nil:
// the check a client makes before it sends.
func ValidConsumerName(name string) error {
	switch {
	case name == "":
		return errors.New("the consumer name must not be empty")
	case len(name) > MaxConsumerName:
		// Quote its start only, cut on a character boundary.
		keep := 40
		for keep > 0 && !utf8.RuneStart(name[keep]) {
			keep--
		}
		return fmt.Errorf("the consumer name %q... is %d bytes long, more than %d", name[:keep], len(name), MaxConsumerName)
	}
	return nil
}

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

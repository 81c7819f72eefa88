package pass

import (
	"context"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
)

// Counting is a Querier that counts the statements it sends, so a pass can
// report `statements` in its result and tests can assert a pass stays
// set-based (a handful of statements, not one per row).
type Counting struct {
	Q store.Querier
	n atomic.Int64
}

// Count is the number of statements sent so far.
func (c *Counting) Count() int64 { return c.n.Load() }

func (c *Counting) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.n.Add(1)
	return c.Q.Exec(ctx, sql, args...)
}

func (c *Counting) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.Q.Query(ctx, sql, args...)
}

func (c *Counting) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.Q.QueryRow(ctx, sql, args...)
}

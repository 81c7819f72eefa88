package passtest

import (
	"context"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// StatementClock is real time moved on by Step each time a statement
// beginning with Tag is sent through it. Given as both the pass's DB and
// its Now, it lets a test spend a budget batch by batch, however fast the
// machine runs the batches.
type StatementClock struct {
	pass.DB
	Tag    string
	Step   time.Duration
	offset atomic.Int64
}

// Now is the clock's time.
func (c *StatementClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// SendBatch moves the clock for each tagged statement in b, then sends it.
func (c *StatementClock) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if strings.HasPrefix(q.SQL, c.Tag) {
			c.offset.Add(int64(c.Step))
		}
	}
	return c.DB.SendBatch(ctx, b)
}

package benchkit

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// TimedDB is a pass.DB that times the statements it sends: their total
// (a watching pass's database work, told from its sleeps) and the longest
// (each pass statement is its own transaction, so that is the longest any
// lock of the pass is held). A batch is timed until its results close.
type TimedDB struct {
	DB pass.DB

	mu      sync.Mutex
	total   time.Duration
	longest time.Duration
}

// Total is the time every statement took.
func (t *TimedDB) Total() time.Duration { t.mu.Lock(); defer t.mu.Unlock(); return t.total }

// Longest is the longest one statement took.
func (t *TimedDB) Longest() time.Duration { t.mu.Lock(); defer t.mu.Unlock(); return t.longest }

func (t *TimedDB) note(start time.Time) {
	d := time.Since(start)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.total += d
	t.longest = max(t.longest, d)
}

func (t *TimedDB) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	defer t.note(time.Now())
	return t.DB.Exec(ctx, sql, args...)
}

func (t *TimedDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	defer t.note(time.Now())
	return t.DB.Query(ctx, sql, args...)
}

func (t *TimedDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	defer t.note(time.Now())
	return t.DB.QueryRow(ctx, sql, args...)
}

func (t *TimedDB) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return &timedBatch{BatchResults: t.DB.SendBatch(ctx, b), t: t, start: time.Now()}
}

type timedBatch struct {
	pgx.BatchResults
	t     *TimedDB
	start time.Time
}

func (b *timedBatch) Close() error {
	defer b.t.note(b.start)
	return b.BatchResults.Close()
}

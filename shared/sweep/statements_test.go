package sweep_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/passtest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// What a pass sends: one statement per batch, three for an idle pass, and
// no batch after the budget.

// statementTracer counts what the pool sends, independently of the pass's
// own counter.
type statementTracer struct {
	mu     sync.Mutex
	total  int
	resets int
}

func (s *statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.total++
	if strings.HasPrefix(data.SQL, store.DeliveriesSQL.Tag("sweep_reset")) {
		s.resets++
	}
	return ctx
}

func (s *statementTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// The passes send each statement in a batch behind its timeout
// (store.Bounded); the tracer counts the statement, not the timeout.
func (s *statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (s *statementTracer) TraceBatchQuery(ctx context.Context, c *pgx.Conn, data pgx.TraceBatchQueryData) {
	if !strings.Contains(data.SQL, "set_config('statement_timeout'") {
		s.TraceQueryStart(ctx, c, pgx.TraceQueryStartData{SQL: data.SQL})
	}
}

func (s *statementTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// SWEEP_BATCH_LIMIT=100 over 1,000 stuck rows: one pass resets all of them
// in exactly 10 reset statements. The tenth batch knows nothing is left
// (its `more` probe), so no empty eleventh batch is sent: the whole pass is
// 1 count + 1 consumers' figures + 10 resets + 1 wake + 1 state = 14
// statements.
func TestBatchLimitResetsAllInExactlyEnoughBatches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedDelivered(t, db, 1000, time.Hour)
	pc := db.PoolConfig(t, "")
	tracer := &statementTracer{}
	pc.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	res := run(t, newSweeper(t, pool, func(c *sweep.Config) { c.BatchLimit = 100; c.PassBudget = 20 * time.Second }))
	counts.Want(t, "",
		counts.Of("Reset", res.Reset, 1000, "all 1000 in one pass"),
		counts.Of("Batches", res.Batches, 10),
		counts.Of("Statements", res.Statements, 14),
	)
	counts.Want(t, "traced", counts.Of("reset statements", tracer.resets, 10), counts.Of("statements", tracer.total, 14))
	if res.More {
		t.Error("More = true, want false: nothing is left")
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 1`); n != 1000 {
		t.Errorf("%d rows reset, want 1000", n)
	}
}

// An idle table costs one count, the consumers' figures, one empty batch
// and the state row.
func TestIdlePassIsFourStatements(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	res := run(t, newSweeper(t, db.Pool))
	counts.Want(t, "", counts.Of("Statements", res.Statements, 4), counts.Of("Batches", res.Batches, 1), counts.Of("Open", res.Open, 0))
	if res.Woken {
		t.Error("Woken = true, want false on an idle table")
	}
	if res.OldestOpenAgeS != 0 {
		t.Errorf("OldestOpenAgeS = %v, want 0", res.OldestOpenAgeS)
	}
	var passes int64
	var last *time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT passes, last_pass_at FROM outbox.sweep_state`).Scan(&passes, &last); err != nil {
		t.Fatal(err)
	}
	if passes != 1 {
		t.Errorf("sweep_state passes = %d, want 1", passes)
	}
	if last == nil {
		t.Error("sweep_state last_pass_at = null, want the pass's time")
	}
}

// The budget stops the batches: with a clock that moves 1s per batch and
// a 0.5s budget, one batch runs, the pass says `more`, and the next pass
// carries on where it stopped.
func TestBudgetStopsBatches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedDelivered(t, db, 30, time.Hour)
	q := &passtest.StatementClock{DB: db.Pool, Tag: store.DeliveriesSQL.Tag("sweep_reset"), Step: time.Second}
	s := newSweeperWith(t, q, testConfig(func(c *sweep.Config) { c.BatchLimit = 10; c.PassBudget = 500 * time.Millisecond }), sweep.Options{Options: pass.Options{Now: q.Now}})
	res := run(t, s)
	counts.Want(t, "first pass", counts.Of("Reset", res.Reset, 10, "one batch of 10"), counts.Of("Batches", res.Batches, 1))
	if !res.More {
		t.Error("first pass: More = false, want true (stopped by the budget)")
	}
	var total int64 = res.Reset
	for range 2 {
		total += run(t, s).Reset
	}
	if total != 30 {
		t.Fatalf("three passes reset %d, want 30", total)
	}
}

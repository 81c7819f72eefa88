package sweep_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// What a sweep pass does when the database misbehaves: a statement blocked
// on a lock, a pass cut off in the middle.

// A session holding deliveries locked: the pass's first statement waits on
// it, the server cancels it at the budget's end, and the pass answers
// normally, naming the statement, instead of outliving its invocation.
func TestLockedDeliveriesEndThePassOnItsBudget(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedDelivered(t, db, 10, time.Hour)
	// A bound far above the budget, so a pass that ignored its budget fails
	// the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := db.Connect(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	testdb.Exec(t, tx, `LOCK TABLE outbox.deliveries IN ACCESS EXCLUSIVE MODE`)

	const budget = time.Second
	res, err := newSweeper(t, db.Pool, func(c *sweep.Config) { c.PassBudget = budget }).RunOnce(ctx, nil)
	if err != nil {
		t.Fatalf("RunOnce: %v, want a normal end on the budget", err)
	}
	if !strings.Contains(res.TimedOut, "statement timeout") {
		t.Errorf("TimedOut = %q, want the statement the budget ended", res.TimedOut)
	}
	if took := time.Duration(res.DurationMS) * time.Millisecond; took > budget+2*time.Second {
		t.Errorf("the pass took %s, want its %s budget and the finish", took, budget)
	}
	if res.Reset != 0 {
		t.Errorf("Reset = %d, want nothing moved under the lock", res.Reset)
	}
}

// sweep_state's totals count what committed, also when the pass fails after
// some of its batches: each batch adds its own in its statement.
func TestTotalsCountWhatCommittedWhenAPassFailsMidway(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	res := cancelledMidway(t, db)
	committed := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending'`)
	if total := testdb.Scalar[int64](t, db.Pool, `SELECT resets_total FROM outbox.sweep_state`); total != committed {
		t.Errorf("resets_total = %d, want the %d resets that committed", total, committed)
	}
	if res.Reset != committed {
		t.Errorf("Reset = %d, want the %d that committed", res.Reset, committed)
	}
}

// The finish rule: a pass whose invocation is cancelled midway still
// wakes the relay for what it reset and records itself in sweep_state, in
// the time the budget keeps for its last statements.
func TestACancelledPassIsStillRecorded(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	res := cancelledMidway(t, db)
	if passes := testdb.Scalar[int64](t, db.Pool, `SELECT passes FROM outbox.sweep_state`); passes != 1 {
		t.Errorf("sweep_state.passes = %d after a cancelled pass, want it recorded", passes)
	}
	if last := testdb.Scalar[int64](t, db.Pool, `SELECT last_reset FROM outbox.sweep_state`); last != res.Reset || last == 0 {
		t.Errorf("sweep_state.last_reset = %d, want the pass's %d resets", last, res.Reset)
	}
	if !res.Woken {
		t.Error("the relay was not woken for the rows the cancelled pass reset")
	}
}

// cancelledMidway runs a pass over 1,000 stuck rows in batches of 100
// whose context is cancelled in the middle of its third batch (a trigger
// makes each row update take 2ms, so a batch runs for 200ms+, and the
// third is still running when the cancellation comes). It fails t unless
// the pass ends with the cancellation, and returns its partial result.
func cancelledMidway(t *testing.T, db *testdb.DB) *sweep.Result {
	t.Helper()
	seedDelivered(t, db, 1000, time.Hour)
	testdb.Exec(t, db.Pool, `CREATE FUNCTION outbox.slow_update() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$`)
	testdb.Exec(t, db.Pool, `CREATE TRIGGER slow BEFORE UPDATE ON outbox.deliveries FOR EACH ROW EXECUTE FUNCTION outbox.slow_update()`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &cancelOnBatch{DB: db.Pool, batch: 3, cancel: cancel}
	res, err := newSweeper(t, q, func(c *sweep.Config) { c.BatchLimit = 100 }).RunOnce(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %+v, %v; want context.Canceled", res, err)
	}
	return res
}

// cancelOnBatch cancels the pass's context a moment after the given reset
// statement has been sent, while the database is still running it.
type cancelOnBatch struct {
	pass.DB
	batch  int
	cancel context.CancelFunc
	seen   atomic.Int32
}

func (c *cancelOnBatch) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if strings.HasPrefix(q.SQL, store.DeliveriesSQL.Tag("sweep_reset")) && int(c.seen.Add(1)) == c.batch {
			time.AfterFunc(50*time.Millisecond, c.cancel)
		}
	}
	return c.DB.SendBatch(ctx, b)
}

// The context is cancelled in the middle of the third batch
// (cancelledMidway): the batches that committed stay, the one cut off is rolled back whole, no row
// is half updated, and the next pass finishes the rest.
func TestCancelledMidPassKeepsOnlyCommittedBatches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	res := cancelledMidway(t, db)
	counts.Want(t, "partial result",
		counts.Of("Reset", res.Reset, 200, "the 2 committed batches' 200 rows"),
		counts.Of("Batches", res.Batches, 2, "the 2 committed batches"),
	)
	// The cut-off statement's backend may still be unwinding: wait until
	// no reset statement runs, then look.
	deadline := time.Now().Add(10 * time.Second)
	for testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
		AND state = 'active' AND query LIKE $1`, store.DeliveriesSQL.Tag("sweep_reset")+"%") > 0 {
		if time.Now().After(deadline) {
			t.Fatal("cancelled reset statement still running after 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	rows, err := db.Pool.Query(context.Background(), `SELECT state || '/' || redeliveries, count(*) FROM outbox.deliveries GROUP BY 1 ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type stateCount struct {
		State string // state/redeliveries
		Rows  int64
	}
	byState, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stateCount])
	if err != nil {
		t.Fatal(err)
	}
	// No row half updated: the cut-off batch is rolled back whole.
	if want := []stateCount{{"delivered/0", 800}, {"pending/1", 200}}; !slices.Equal(byState, want) {
		t.Fatalf("after the cancelled pass: %v, want %v", byState, want)
	}
	invariants(t, db.Pool)

	testdb.Exec(t, db.Pool, `DROP TRIGGER slow ON outbox.deliveries`)
	next := run(t, newSweeper(t, db.Pool, func(c *sweep.Config) { c.BatchLimit = 100 }))
	if next.Reset != 800 {
		t.Errorf("next pass: Reset = %d, want the remaining 800", next.Reset)
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 1`); n != 1000 {
		t.Errorf("%d rows reset once, want 1000", n)
	}
	invariants(t, db.Pool)
}

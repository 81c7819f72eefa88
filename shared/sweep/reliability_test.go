package sweep_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
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
	exec(t, tx, `LOCK TABLE outbox.deliveries IN ACCESS EXCLUSIVE MODE`)

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
	seedDelivered(t, db, 1000, time.Hour)
	exec(t, db.Pool, `CREATE FUNCTION outbox.slow_update() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$`)
	exec(t, db.Pool, `CREATE TRIGGER slow BEFORE UPDATE ON outbox.deliveries FOR EACH ROW EXECUTE FUNCTION outbox.slow_update()`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &cancelOnBatch{DB: db.Pool, batch: 3, cancel: cancel}
	res, err := newSweeper(t, q, func(c *sweep.Config) { c.BatchLimit = 100 }).RunOnce(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %v, %v; want context.Canceled", res, err)
	}
	committed := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending'`)
	if total := scalar[int64](t, db.Pool, `SELECT resets_total FROM outbox.sweep_state`); total != committed {
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
	seedDelivered(t, db, 1000, time.Hour)
	// Each row update takes 2ms, so the third batch is still running when
	// the context is cancelled.
	exec(t, db.Pool, `CREATE FUNCTION outbox.slow_update() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$`)
	exec(t, db.Pool, `CREATE TRIGGER slow BEFORE UPDATE ON outbox.deliveries FOR EACH ROW EXECUTE FUNCTION outbox.slow_update()`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &cancelOnBatch{DB: db.Pool, batch: 3, cancel: cancel}
	res, err := newSweeper(t, q, func(c *sweep.Config) { c.BatchLimit = 100 }).RunOnce(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %v, %v; want context.Canceled", res, err)
	}
	if passes := scalar[int64](t, db.Pool, `SELECT passes FROM outbox.sweep_state`); passes != 1 {
		t.Errorf("sweep_state.passes = %d after a cancelled pass, want it recorded", passes)
	}
	if last := scalar[int64](t, db.Pool, `SELECT last_reset FROM outbox.sweep_state`); last != res.Reset || last == 0 {
		t.Errorf("sweep_state.last_reset = %d, want the pass's %d resets", last, res.Reset)
	}
	if !res.Woken {
		t.Error("the relay was not woken for the rows the cancelled pass reset")
	}
}

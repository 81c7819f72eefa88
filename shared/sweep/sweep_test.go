package sweep_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// What one pass does to stuck rows: reset, dead after the limit, and one
// wake for stuck work (the helpers are in helpers_test.go).

// A delivered row past the threshold is reset; a fresh one is not. Rows go
// through the real relay calls (Enqueue, MarkDelivered), then one is aged.
func TestStuckRowResetFreshRowNot(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ob := newOutbox(t, db)
	ctx := context.Background()
	var ids [2]int64
	for i := range ids {
		id, err := ob.Enqueue(ctx, nil, outbox.NewDelivery{Recipient: "agent:1", Kind: "work", Payload: []byte("x")})
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.MarkDelivered(ctx, nil, id); err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	stuck, fresh := ids[0], ids[1]
	testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET delivered_at = now() - interval '2 minutes' WHERE id = $1`, stuck)

	res := run(t, newSweeper(t, db.Pool))
	counts.Want(t, "",
		counts.Of("Reset", res.Reset, 1),
		counts.Of("Dead", res.Dead, 0),
		counts.Of("Open", res.Open, 2),
		counts.Of("StuckPending", res.StuckPending, 0),
	)
	if !res.Woken {
		t.Error("Woken = false, want true: a row was reset")
	}
	wantRow(t, "stuck row after the sweep", get(t, db.Pool, stuck), "pending", 1)
	if r := get(t, db.Pool, stuck); r.DeliveredAt != nil {
		t.Errorf("stuck row after the sweep: delivered_at %v, want null", *r.DeliveredAt)
	}
	wantRow(t, "fresh row after the sweep", get(t, db.Pool, fresh), "delivered", 0)
	// The relay can claim the reset row again.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	claimed, err := ob.ClaimPending(ctx, tx, 10)
	if err != nil {
		t.Fatalf("ClaimPending after the sweep: %v", err)
	}
	if ids := deliveryIDs(claimed); !slices.Equal(ids, []int64{stuck}) {
		t.Errorf("ClaimPending after the sweep claimed %v, want the reset row [%d]", ids, stuck)
	}
	invariants(t, db.Pool)
}

// A row created long ago but delivered just now is not stuck: the threshold
// runs from delivered_at (the reference measured from created_at).
func TestStuckTimeRunsFromDeliveredAt(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ids := seedDelivered(t, db, 1, 0)
	testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET created_at = now() - interval '3 hours', delivered_at = now() WHERE id = $1`, ids[0])

	res := run(t, newSweeper(t, db.Pool))
	counts.Want(t, "", counts.Of("Reset", res.Reset, 0, "the row was delivered just now"), counts.Of("Dead", res.Dead, 0))
	if res.Woken {
		t.Error("Woken = true, want false: nothing is stuck")
	}
	wantRow(t, "old but just delivered row", get(t, db.Pool, ids[0]), "delivered", 0)
	// It is open, and its age (by created_at) shows in the gauge.
	if res.Open != 1 {
		t.Errorf("Open = %d, want 1", res.Open)
	}
	if res.OldestOpenAgeS < 3*3600-60 {
		t.Errorf("OldestOpenAgeS = %.0f, want about 3h (from created_at)", res.OldestOpenAgeS)
	}
}

// A second sweep right after the first resets nothing and creates nothing.
func TestSecondSweepResetsNothing(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedDelivered(t, db, 50, time.Hour)
	s := newSweeper(t, db.Pool)
	if first := run(t, s); first.Reset != 50 {
		t.Fatalf("first sweep: Reset = %d, want 50", first.Reset)
	}
	second := run(t, s)
	// The reset rows were created an hour ago, so the second pass sees them
	// as stuck pending (the relay has not picked them up) and wakes.
	counts.Want(t, "second sweep", counts.Of("Reset", second.Reset, 0), counts.Of("Dead", second.Dead, 0), counts.Of("StuckPending", second.StuckPending, 50))
	if !second.Woken {
		t.Error("second sweep: Woken = false, want true (stuck pending rows)")
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries`); n != 50 {
		t.Errorf("%d rows, want 50: the sweep must never insert", n)
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 1`); n != 50 {
		t.Errorf("%d rows pending with redeliveries 1, want 50", n)
	}
	invariants(t, db.Pool)
}

// A row stuck once more after using up its redeliveries becomes dead, and
// later sweeps leave it alone.
func TestMaxRedeliveriesMakesRowDead(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ob := newOutbox(t, db)
	ctx := context.Background()
	id, err := ob.Enqueue(ctx, nil, outbox.NewDelivery{Recipient: "agent:gone", Kind: "work", Payload: []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	s := newSweeper(t, db.Pool, func(c *sweep.Config) { c.MaxRedeliveries = 2 })
	// deliverAndStick plays a relay pushing to a recipient that never acks.
	deliverAndStick := func() {
		t.Helper()
		if err := ob.MarkDelivered(ctx, nil, id); err != nil {
			t.Fatal(err)
		}
		testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET delivered_at = now() - interval '5 minutes' WHERE id = $1`, id)
	}
	for i := 1; i <= 2; i++ {
		deliverAndStick()
		res := run(t, s)
		if res.Reset != 1 {
			t.Errorf("stuck %d of 2 times: Reset = %d, want 1", i, res.Reset)
		}
		if res.Dead != 0 {
			t.Errorf("stuck %d of 2 times: Dead = %d, want 0", i, res.Dead)
		}
	}
	deliverAndStick()
	res := run(t, s)
	counts.Want(t, "stuck a third time", counts.Of("Reset", res.Reset, 0), counts.Of("Dead", res.Dead, 1))
	if !res.Woken {
		t.Error("stuck a third time: Woken = false, want true")
	}
	r := get(t, db.Pool, id)
	wantRow(t, "row after the limit", r, "dead", 2)
	if r.Attempts != 3 {
		t.Errorf("row after the limit: attempts %d, want 3", r.Attempts)
	}
	if r.DeliveredAt == nil {
		t.Error("row after the limit: delivered_at null, want the last delivery's kept")
	}
	if r.DeadAt == nil {
		t.Fatal("row after the limit: dead_at null, want it stamped")
	}
	again := run(t, s)
	counts.Want(t, "sweep after dead",
		counts.Of("Reset", again.Reset, 0),
		counts.Of("Dead", again.Dead, 0),
		counts.Of("Open", again.Open, 0, "a dead row is not open"),
	)
	if again.Woken {
		t.Error("sweep after dead: Woken = true, want false")
	}
	r2 := get(t, db.Pool, id)
	if r2.State != "dead" {
		t.Errorf("dead row after another sweep: state %s, want dead", r2.State)
	}
	if r2.DeadAt == nil || !r2.DeadAt.Equal(*r.DeadAt) {
		t.Errorf("dead row after another sweep: dead_at %v, want %v unchanged", r2.DeadAt, *r.DeadAt)
	}
	if err := ob.MarkDelivered(ctx, nil, id); !errors.Is(err, outbox.ErrLostRace) {
		t.Errorf("MarkDelivered on a dead row = %v, want a lost race", err)
	}
	if deadTotal := testdb.Scalar[int64](t, db.Pool, `SELECT dead_total FROM outbox.sweep_state`); deadTotal != 1 {
		t.Errorf("sweep_state dead_total = %d, want 1", deadTotal)
	}
	invariants(t, db.Pool)
}

// SWEEP_MAX_REDELIVERIES=0 means never dead, however often a row is reset.
func TestNeverDeadKeepsResetting(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ids := seedDelivered(t, db, 3, time.Hour)
	testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET redeliveries = 500, attempts = 501 WHERE id = ANY($1)`, ids)
	res := run(t, newSweeper(t, db.Pool, func(c *sweep.Config) { c.MaxRedeliveries = pass.Off }))
	counts.Want(t, "", counts.Of("Reset", res.Reset, 3), counts.Of("Dead", res.Dead, 0))
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 501`); n != 3 {
		t.Errorf("%d rows pending with 501 redeliveries, want 3", n)
	}
}

// One statement can both reset and kill: rows under and at the limit in
// the same batch each go their own way.
func TestResetAndDeadInOneBatch(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ids := seedDelivered(t, db, 10, time.Hour)
	testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET redeliveries = 3, attempts = 4 WHERE id = ANY($1)`, ids[:4])
	res := run(t, newSweeper(t, db.Pool, func(c *sweep.Config) { c.MaxRedeliveries = 3 }))
	counts.Want(t, "", counts.Of("Reset", res.Reset, 6), counts.Of("Dead", res.Dead, 4), counts.Of("Batches", res.Batches, 1))
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE id = ANY($1) AND state = 'dead'`, ids[:4]); n != 4 {
		t.Errorf("%d of the rows at the limit are dead, want 4", n)
	}
	invariants(t, db.Pool)
}

// The wake arrives on a LISTENing connection once per pass with stuck work
// and not for a pass without. Absence is proved without a sleep: a sentinel
// notified after the pass returned must be the next thing received, since
// notifications arrive in commit order.
func TestWakeNotifiedOncePerPassWithStuckWork(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	listener := db.Connect(t)
	ctx := context.Background()
	channel := db.Schema.DeliveriesChannel()
	testdb.Exec(t, listener, `LISTEN `+pgx.Identifier{channel}.Sanitize())

	next := func() *pgconn.Notification {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := listener.WaitForNotification(wctx)
		if err != nil {
			t.Fatalf("waiting for a notification: %v", err)
		}
		return n
	}
	sentinel := func(tag string) {
		t.Helper()
		testdb.Exec(t, db.Pool, `SELECT pg_notify($1, $2)`, channel, tag)
		if n := next(); n.Payload != tag {
			t.Fatalf("got %q on %s before sentinel %q: an unexpected wake", n.Payload, n.Channel, tag)
		}
	}

	seedDelivered(t, db, 3, time.Hour)
	ob := newOutbox(t, db)
	old, err := ob.Enqueue(ctx, nil, outbox.NewDelivery{Recipient: "agent:2", Kind: "work", Payload: []byte("y")})
	if err != nil {
		t.Fatal(err)
	}
	testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET created_at = now() - interval '10 minutes' WHERE id = $1`, old)

	s := newSweeper(t, db.Pool, func(c *sweep.Config) { c.BatchLimit = 1 }) // several batches, still one wake
	res := run(t, s)
	if !res.Woken {
		t.Error("Woken = false, want true")
	}
	counts.Want(t, "", counts.Of("Reset", res.Reset, 3), counts.Of("StuckPending", res.StuckPending, 1), counts.Of("Batches", res.Batches, 3))
	n := next()
	if n.Channel != channel {
		t.Errorf("notification on %s, want %s", n.Channel, channel)
	}
	if want := `{"reset":3,"stuck_pending":1}`; n.Payload != want {
		t.Errorf("notification payload %q, want %q", n.Payload, want)
	}
	sentinel("after-first-pass") // exactly one wake for the pass

	// Nothing stuck any more: claim and ack everything.
	testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET state = 'acked', attempts = attempts + 1, delivered_at = now(), acked_at = now()`)
	if quiet := run(t, s); quiet.Woken {
		t.Errorf("quiet pass: Woken = true, want false; %+v", quiet)
	}
	sentinel("after-quiet-pass")
}

// Stuck pending rows are counted, never changed.
func TestStuckPendingCountedNotChanged(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ob := newOutbox(t, db)
	ctx := context.Background()
	var ids []int64
	for i := range 3 {
		id, err := ob.Enqueue(ctx, nil, outbox.NewDelivery{Recipient: fmt.Sprint("agent:", i), Kind: "work", Payload: []byte("z")})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	testdb.Exec(t, db.Pool, `UPDATE outbox.deliveries SET created_at = now() - interval '1 hour' WHERE id = ANY($1)`, ids[:2])
	res := run(t, newSweeper(t, db.Pool))
	counts.Want(t, "",
		counts.Of("StuckPending", res.StuckPending, 2),
		counts.Of("Open", res.Open, 3),
		counts.Of("Reset", res.Reset, 0, "pending rows are never changed"),
	)
	if !res.Woken {
		t.Error("Woken = false, want true (stuck pending rows)")
	}
	if res.OldestOpenAgeS < 3590 || res.OldestOpenAgeS > 3700 {
		t.Errorf("OldestOpenAgeS = %.1f, want about 3600", res.OldestOpenAgeS)
	}
	if n := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 0 AND attempts = 0`); n != 3 {
		t.Errorf("%d untouched pending rows, want 3", n)
	}
}

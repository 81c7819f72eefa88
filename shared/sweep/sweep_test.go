package sweep_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// Helpers: a sweep over a fresh real database per test, rows seeded the way
// the relay leaves them.

func testConfig(mut ...func(*sweep.Config)) sweep.Config {
	c := sweep.Config{
		Schema:          testdb.Schema,
		StuckAfter:      time.Minute,
		BatchLimit:      1000,
		MaxRedeliveries: 10,
		PassBudget:      30 * time.Second,
	}
	for _, m := range mut {
		m(&c)
	}
	return c
}

func newSweeper(t testing.TB, db store.DB, mut ...func(*sweep.Config)) *sweep.Service {
	t.Helper()
	return newSweeperWith(t, db, testConfig(mut...), sweep.Options{})
}

func newSweeperWith(t testing.TB, db store.DB, cfg sweep.Config, opts sweep.Options) *sweep.Service {
	t.Helper()
	s, err := sweep.New(db, cfg, opts)
	if err != nil {
		t.Fatalf("sweep.New: %v", err)
	}
	return s
}

func run(t testing.TB, s *sweep.Service) *sweep.Result {
	t.Helper()
	res, err := s.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v (partial %+v)", err, res)
	}
	return res
}

func newOutbox(t testing.TB, db *testdb.DB) *outbox.Outbox {
	t.Helper()
	ob, err := outbox.New(db.Pool, outbox.Options{Schema: testdb.Schema})
	if err != nil {
		t.Fatal(err)
	}
	return ob
}

func exec(t testing.TB, q store.Querier, sql string, args ...any) pgconn.CommandTag {
	t.Helper()
	tag, err := q.Exec(context.Background(), sql, args...)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return tag
}

func scalar[T any](t testing.TB, q store.Querier, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := q.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// seedDelivered enqueues n rows and marks them delivered the way the relay
// does (attempts + 1, delivered_at stamped), set-based, with created_at and
// delivered_at both `ago` in the past. Returns the ids in order.
func seedDelivered(t testing.TB, db *testdb.DB, n int, ago time.Duration) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`INSERT INTO outbox.deliveries (recipient, kind, payload)
		 SELECT 'agent:' || g, 'work', '\x00'::bytea FROM generate_series(1, $1) g RETURNING id`, n)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	exec(t, db.Pool, `UPDATE outbox.deliveries SET state = 'delivered', attempts = attempts + 1,
		created_at = now() - $2::bigint * interval '1 microsecond',
		delivered_at = now() - $2::bigint * interval '1 microsecond' WHERE id = ANY($1)`, ids, ago.Microseconds())
	return ids
}

// invariants fails on rows in an impossible state. acked is terminal, so
// an acked_at on a row that is not acked means something un-acked it.
func invariants(t testing.TB, q store.Querier) {
	t.Helper()
	var bad int64
	if err := q.QueryRow(context.Background(), `SELECT count(*) FROM outbox.deliveries WHERE
		   (state = 'delivered' AND delivered_at IS NULL)
		OR (state = 'acked' AND acked_at IS NULL)
		OR (state <> 'acked' AND acked_at IS NOT NULL)
		OR (state = 'dead' AND dead_at IS NULL)
		OR (state = 'pending' AND delivered_at IS NOT NULL)
		OR redeliveries > attempts
		OR redeliveries < 0`).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad != 0 {
		t.Fatalf("%d rows in an impossible state", bad)
	}
}

type row struct {
	State        string
	Redeliveries int
	Attempts     int
	DeliveredAt  *time.Time
	DeadAt       *time.Time
}

// wantRow checks a row's state and redeliveries.
func wantRow(t testing.TB, what string, r row, state string, redeliveries int) {
	t.Helper()
	if r.State != state {
		t.Errorf("%s: state %s, want %s", what, r.State, state)
	}
	if r.Redeliveries != redeliveries {
		t.Errorf("%s: redeliveries %d, want %d", what, r.Redeliveries, redeliveries)
	}
}

func deliveryIDs(ds []outbox.Delivery) []int64 {
	ids := make([]int64, len(ds))
	for i, d := range ds {
		ids[i] = d.ID
	}
	return ids
}

func get(t testing.TB, q store.Querier, id int64) row {
	t.Helper()
	var r row
	if err := q.QueryRow(context.Background(), `SELECT state, redeliveries, attempts, delivered_at, dead_at
		FROM outbox.deliveries WHERE id = $1`, id).Scan(&r.State, &r.Redeliveries, &r.Attempts, &r.DeliveredAt, &r.DeadAt); err != nil {
		t.Fatal(err)
	}
	return r
}

// ownPool is a pool of its own on the test's database, as another Lambda
// environment (or another relay process) would have.
func ownPool(t testing.TB, db *testdb.DB) *pgxpool.Pool {
	t.Helper()
	return db.NewPool(t, "")
}

// racingSweeps sets up n sweeps, each on its own pool, in batches of
// batchLimit rows so that their statements interleave with each other and
// with whatever else the test runs, all released at once when start is
// closed. The returned function waits for every sweep and returns their
// results in order; a sweep that failed fails the test.
func racingSweeps(t *testing.T, db *testdb.DB, n, batchLimit int, start <-chan struct{}) (wait func() []*sweep.Result) {
	t.Helper()
	results := make([]*sweep.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		s := newSweeper(t, ownPool(t, db), func(c *sweep.Config) { c.BatchLimit = batchLimit })
		wg.Go(func() {
			<-start
			results[i], errs[i] = s.RunOnce(context.Background())
		})
	}
	return func() []*sweep.Result {
		t.Helper()
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("sweep %d: %v (partial %v)", i, err, results[i])
			}
		}
		return results
	}
}

// resetTotal adds up what the sweeps reset.
func resetTotal(results []*sweep.Result) int64 {
	var n int64
	for _, r := range results {
		n += r.Reset
	}
	return n
}

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
	exec(t, db.Pool, `UPDATE outbox.deliveries SET delivered_at = now() - interval '2 minutes' WHERE id = $1`, stuck)

	res := run(t, newSweeper(t, db.Pool))
	if res.Reset != 1 {
		t.Errorf("Reset = %d, want 1", res.Reset)
	}
	if res.Dead != 0 {
		t.Errorf("Dead = %d, want 0", res.Dead)
	}
	if res.Open != 2 {
		t.Errorf("Open = %d, want 2", res.Open)
	}
	if res.StuckPending != 0 {
		t.Errorf("StuckPending = %d, want 0", res.StuckPending)
	}
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
	exec(t, db.Pool, `UPDATE outbox.deliveries SET created_at = now() - interval '3 hours', delivered_at = now() WHERE id = $1`, ids[0])

	res := run(t, newSweeper(t, db.Pool))
	if res.Reset != 0 {
		t.Errorf("Reset = %d, want 0: the row was delivered just now", res.Reset)
	}
	if res.Dead != 0 {
		t.Errorf("Dead = %d, want 0", res.Dead)
	}
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
	if second.Reset != 0 {
		t.Errorf("second sweep: Reset = %d, want 0", second.Reset)
	}
	if second.Dead != 0 {
		t.Errorf("second sweep: Dead = %d, want 0", second.Dead)
	}
	// The reset rows were created an hour ago, so the second pass sees them
	// as stuck pending (the relay has not picked them up) and wakes.
	if second.StuckPending != 50 {
		t.Errorf("second sweep: StuckPending = %d, want 50", second.StuckPending)
	}
	if !second.Woken {
		t.Error("second sweep: Woken = false, want true (stuck pending rows)")
	}
	if n := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries`); n != 50 {
		t.Errorf("%d rows, want 50: the sweep must never insert", n)
	}
	if n := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 1`); n != 50 {
		t.Errorf("%d rows pending with redeliveries 1, want 50", n)
	}
	invariants(t, db.Pool)
}

// Four sweeps, each on its own pool (as four Lambda environments would
// be), start together over 5,000 stuck rows: every row is reset exactly
// once and the reset figures add up to 5,000.
func TestConcurrentSweepsResetEachRowOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const n, sweepers = 5000, 4
	seedDelivered(t, db, n, time.Hour)

	start := make(chan struct{})
	// Batches of 100, so the four passes interleave over many statements.
	sweeps := racingSweeps(t, db, sweepers, 100, start)
	close(start)
	results := sweeps()
	for i, r := range results {
		t.Logf("sweep %d: reset %d in %d batches", i, r.Reset, r.Batches)
	}
	if total := resetTotal(results); total != n {
		t.Errorf("sum of Reset = %d, want %d", total, n)
	}
	if bad := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state <> 'pending' OR redeliveries <> 1`); bad != 0 {
		t.Errorf("%d rows not reset exactly once", bad)
	}
	var passes, resets int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT passes, resets_total FROM outbox.sweep_state`).Scan(&passes, &resets); err != nil {
		t.Fatal(err)
	}
	if passes != sweepers {
		t.Errorf("sweep_state passes = %d, want %d", passes, sweepers)
	}
	if resets != n {
		t.Errorf("sweep_state resets_total = %d, want %d", resets, n)
	}
	invariants(t, db.Pool)
}

// Sweeps race a relay acking and re-marking the same rows. An ack that
// succeeded is final (the sweep never resets an acked row); a row the relay
// marks delivered again was reset exactly once; nothing ends impossible.
func TestSweepRacingAckAndMarkDelivered(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const n = 2000
	ids := seedDelivered(t, db, n, time.Hour)

	ob, err := outbox.New(ownPool(t, db), outbox.Options{Schema: testdb.Schema})
	if err != nil {
		t.Fatal(err)
	}

	ctx := context.Background()
	start := make(chan struct{})
	// Two sweeps in batches of 20, so many statements overlap the relay.
	sweeps := racingSweeps(t, db, 2, 20, start)
	var relays sync.WaitGroup
	fail := make(chan error, 2)
	// relay walks every id in its own random order calling op; a lost race
	// is expected, any other error is not.
	relay := func(op func(context.Context, pgx.Tx, int64) error, ok []bool) {
		defer relays.Done()
		order := rand.Perm(n)
		<-start
		for _, i := range order {
			err := op(ctx, nil, ids[i])
			switch {
			case err == nil:
				ok[i] = true
			case !errors.Is(err, outbox.ErrLostRace):
				fail <- err
				return
			}
		}
	}
	acked := make([]bool, n)
	remarked := make([]bool, n)
	relays.Add(2)
	go relay(ob.Ack, acked)
	go relay(ob.MarkDelivered, remarked)
	close(start)
	relays.Wait()
	close(fail)
	for err := range fail {
		t.Fatalf("relay: %v", err)
	}
	swept := resetTotal(sweeps())

	var nAcked, nRemarked, ackUndone, remarkWrong, multiReset int
	for i, id := range ids {
		r := get(t, db.Pool, id)
		if acked[i] {
			nAcked++
			if r.State != "acked" {
				ackUndone++
				t.Logf("row %d: Ack succeeded but the row ended %+v", id, r)
			}
		}
		if remarked[i] {
			nRemarked++
			// Only a pending row can be marked delivered, and only the
			// sweep makes a delivered row pending: exactly one reset.
			if r.Redeliveries != 1 || r.Attempts != 2 {
				remarkWrong++
				t.Logf("row %d: marked delivered again but %+v", id, r)
			}
		}
		if r.Redeliveries > 1 {
			multiReset++
		}
	}
	if ackUndone > 0 {
		t.Errorf("%d rows whose Ack succeeded are not acked at the end", ackUndone)
	}
	if remarkWrong > 0 {
		t.Errorf("%d rows marked delivered again were not reset exactly once", remarkWrong)
	}
	if multiReset > 0 {
		t.Errorf("%d rows were reset more than once", multiReset)
	}
	resetRows := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE redeliveries = 1`)
	if resetRows != swept {
		t.Errorf("sweeps reported %d resets, %d rows carry one", swept, resetRows)
	}
	if swept == 0 {
		t.Error("no race happened: the sweeps reset nothing")
	}
	if nAcked == 0 {
		t.Error("no race happened: the relay acked nothing")
	}
	t.Logf("%d rows: %d reset by the sweeps, %d acked, %d marked delivered again", n, swept, nAcked, nRemarked)
	invariants(t, db.Pool)
}

// The ack half of TestSweepRacingAckAndMarkDelivered on its own, made denser: four relays ack disjoint
// quarters of 4,000 stuck rows while two sweeps reset them. Every row ends
// either acked (and never reset afterwards) or reset once and pending.
func TestSweepNeverResetsAnAckedRow(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const n, ackers = 4000, 4
	ids := seedDelivered(t, db, n, time.Hour)
	ctx := context.Background()
	start := make(chan struct{})
	sweeps := racingSweeps(t, db, 2, 20, start)
	var relays sync.WaitGroup
	fail := make(chan error, ackers)
	acked := make([]bool, n)
	order := rand.Perm(n)
	for a := range ackers {
		ob, err := outbox.New(ownPool(t, db), outbox.Options{Schema: testdb.Schema})
		if err != nil {
			t.Fatal(err)
		}
		mine := order[a*n/ackers : (a+1)*n/ackers]
		relays.Add(1)
		go func() {
			defer relays.Done()
			<-start
			for _, i := range mine {
				switch err := ob.Ack(ctx, nil, ids[i]); {
				case err == nil:
					acked[i] = true
				case !errors.Is(err, outbox.ErrLostRace):
					fail <- err
					return
				}
			}
		}()
	}
	close(start)
	relays.Wait()
	close(fail)
	for err := range fail {
		t.Fatalf("relay: %v", err)
	}
	swept := resetTotal(sweeps())
	var nAcked, undone int
	for i, id := range ids {
		if !acked[i] {
			continue
		}
		nAcked++
		if r := get(t, db.Pool, id); r.State != "acked" || r.Redeliveries != 0 {
			// Either fact means a reset after the ack: counted once.
			undone++
			t.Logf("row %d: acked, then %+v", id, r)
		}
	}
	if undone > 0 {
		t.Fatalf("%d of %d acked rows were reset afterwards", undone, nAcked)
	}
	if got := int64(n - nAcked); got != swept {
		t.Fatalf("%d rows not acked, sweeps reset %d: every row is acked or reset, once", got, swept)
	}
	t.Logf("%d acked, %d reset", nAcked, swept)
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
		exec(t, db.Pool, `UPDATE outbox.deliveries SET delivered_at = now() - interval '5 minutes' WHERE id = $1`, id)
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
	if res.Reset != 0 {
		t.Errorf("stuck a third time: Reset = %d, want 0", res.Reset)
	}
	if res.Dead != 1 {
		t.Errorf("stuck a third time: Dead = %d, want 1", res.Dead)
	}
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
	if again.Reset != 0 {
		t.Errorf("sweep after dead: Reset = %d, want 0", again.Reset)
	}
	if again.Dead != 0 {
		t.Errorf("sweep after dead: Dead = %d, want 0", again.Dead)
	}
	if again.Open != 0 {
		t.Errorf("sweep after dead: Open = %d, want 0 (a dead row is not open)", again.Open)
	}
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
	if deadTotal := scalar[int64](t, db.Pool, `SELECT dead_total FROM outbox.sweep_state`); deadTotal != 1 {
		t.Errorf("sweep_state dead_total = %d, want 1", deadTotal)
	}
	invariants(t, db.Pool)
}

// SWEEP_MAX_REDELIVERIES=0 means never dead, however often a row is reset.
func TestNeverDeadKeepsResetting(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ids := seedDelivered(t, db, 3, time.Hour)
	exec(t, db.Pool, `UPDATE outbox.deliveries SET redeliveries = 500, attempts = 501 WHERE id = ANY($1)`, ids)
	res := run(t, newSweeper(t, db.Pool, func(c *sweep.Config) { c.MaxRedeliveries = sweep.NeverDead }))
	if res.Reset != 3 {
		t.Errorf("Reset = %d, want 3", res.Reset)
	}
	if res.Dead != 0 {
		t.Errorf("Dead = %d, want 0", res.Dead)
	}
	if n := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 501`); n != 3 {
		t.Errorf("%d rows pending with 501 redeliveries, want 3", n)
	}
}

// One statement can both reset and kill: rows under and at the limit in
// the same batch each go their own way.
func TestResetAndDeadInOneBatch(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ids := seedDelivered(t, db, 10, time.Hour)
	exec(t, db.Pool, `UPDATE outbox.deliveries SET redeliveries = 3, attempts = 4 WHERE id = ANY($1)`, ids[:4])
	res := run(t, newSweeper(t, db.Pool, func(c *sweep.Config) { c.MaxRedeliveries = 3 }))
	if res.Reset != 6 {
		t.Errorf("Reset = %d, want 6", res.Reset)
	}
	if res.Dead != 4 {
		t.Errorf("Dead = %d, want 4", res.Dead)
	}
	if res.Batches != 1 {
		t.Errorf("Batches = %d, want 1", res.Batches)
	}
	if n := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE id = ANY($1) AND state = 'dead'`, ids[:4]); n != 4 {
		t.Errorf("%d of the rows at the limit are dead, want 4", n)
	}
	invariants(t, db.Pool)
}

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
// 1 count + 10 resets + 1 wake + 1 state = 13 statements.
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
	if res.Reset != 1000 {
		t.Errorf("Reset = %d, want all 1000 in one pass", res.Reset)
	}
	if res.More {
		t.Error("More = true, want false: nothing is left")
	}
	if tracer.resets != 10 {
		t.Errorf("%d reset statements traced, want 10", tracer.resets)
	}
	if res.Batches != 10 {
		t.Errorf("Batches = %d, want 10", res.Batches)
	}
	if tracer.total != 13 {
		t.Errorf("%d statements traced, want 13", tracer.total)
	}
	if res.Statements != 13 {
		t.Errorf("Statements = %d, want 13", res.Statements)
	}
	if n := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 1`); n != 1000 {
		t.Errorf("%d rows reset, want 1000", n)
	}
}

// An idle table costs one count, one empty batch and the state row.
func TestIdlePassIsThreeStatements(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	res := run(t, newSweeper(t, db.Pool))
	if res.Statements != 3 {
		t.Errorf("Statements = %d, want 3", res.Statements)
	}
	if res.Batches != 1 {
		t.Errorf("Batches = %d, want 1", res.Batches)
	}
	if res.Woken {
		t.Error("Woken = true, want false on an idle table")
	}
	if res.Open != 0 {
		t.Errorf("Open = %d, want 0", res.Open)
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

// clockOnBatch moves a clock a second forward each time a reset statement
// is sent, so a test can spend a pass's budget batch by batch.
type clockOnBatch struct {
	store.DB
	ticks atomic.Int64
	base  time.Time
}

func (c *clockOnBatch) now() time.Time {
	return c.base.Add(time.Duration(c.ticks.Load()) * time.Second)
}

func (c *clockOnBatch) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if strings.HasPrefix(q.SQL, store.DeliveriesSQL.Tag("sweep_reset")) {
			defer c.ticks.Add(1)
		}
	}
	return c.DB.SendBatch(ctx, b)
}

// The budget stops the batches: with a clock that moves 1s per batch and
// a 0.5s budget, one batch runs, the pass says `more`, and the next pass
// carries on where it stopped.
func TestBudgetStopsBatches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedDelivered(t, db, 30, time.Hour)
	q := &clockOnBatch{DB: db.Pool, base: time.Now()}
	s := newSweeperWith(t, q, testConfig(func(c *sweep.Config) { c.BatchLimit = 10; c.PassBudget = 500 * time.Millisecond }), sweep.Options{Now: q.now})
	res := run(t, s)
	if res.Reset != 10 {
		t.Errorf("first pass: Reset = %d, want one batch of 10", res.Reset)
	}
	if res.Batches != 1 {
		t.Errorf("first pass: Batches = %d, want 1", res.Batches)
	}
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
	exec(t, listener, `LISTEN `+pgx.Identifier{channel}.Sanitize())

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
		exec(t, db.Pool, `SELECT pg_notify($1, $2)`, channel, tag)
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
	exec(t, db.Pool, `UPDATE outbox.deliveries SET created_at = now() - interval '10 minutes' WHERE id = $1`, old)

	s := newSweeper(t, db.Pool, func(c *sweep.Config) { c.BatchLimit = 1 }) // several batches, still one wake
	res := run(t, s)
	if !res.Woken {
		t.Error("Woken = false, want true")
	}
	if res.Reset != 3 {
		t.Errorf("Reset = %d, want 3", res.Reset)
	}
	if res.StuckPending != 1 {
		t.Errorf("StuckPending = %d, want 1", res.StuckPending)
	}
	if res.Batches != 3 {
		t.Errorf("Batches = %d, want 3", res.Batches)
	}
	n := next()
	if n.Channel != channel {
		t.Errorf("notification on %s, want %s", n.Channel, channel)
	}
	if want := `{"reset":3,"stuck_pending":1}`; n.Payload != want {
		t.Errorf("notification payload %q, want %q", n.Payload, want)
	}
	sentinel("after-first-pass") // exactly one wake for the pass

	// Nothing stuck any more: claim and ack everything.
	exec(t, db.Pool, `UPDATE outbox.deliveries SET state = 'acked', attempts = attempts + 1, delivered_at = now(), acked_at = now()`)
	if quiet := run(t, s); quiet.Woken {
		t.Errorf("quiet pass: Woken = true, want false; %+v", quiet)
	}
	sentinel("after-quiet-pass")
}

// cancelOnBatch cancels the pass's context a moment after the given reset
// statement has been sent, while the database is still running it.
type cancelOnBatch struct {
	store.DB
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

// The context is cancelled in the middle of the third batch (a trigger
// makes each row update take 2ms, so a batch of 100 runs for 200ms+): the
// batches that committed stay, the one cut off is rolled back whole, no row
// is half updated, and the next pass finishes the rest.
func TestCancelledMidPassKeepsOnlyCommittedBatches(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	seedDelivered(t, db, 1000, time.Hour)
	exec(t, db.Pool, `CREATE FUNCTION outbox.slow_update() RETURNS trigger LANGUAGE plpgsql AS
		$$ BEGIN PERFORM pg_sleep(0.002); RETURN NEW; END $$`)
	exec(t, db.Pool, `CREATE TRIGGER slow BEFORE UPDATE ON outbox.deliveries FOR EACH ROW EXECUTE FUNCTION outbox.slow_update()`)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	q := &cancelOnBatch{DB: db.Pool, batch: 3, cancel: cancel}
	s := newSweeper(t, q, func(c *sweep.Config) { c.BatchLimit = 100 })
	res, err := s.RunOnce(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %+v, %v; want context.Canceled", res, err)
	}
	if res.Reset != 200 {
		t.Errorf("partial result: Reset = %d, want the 2 committed batches' 200 rows", res.Reset)
	}
	if res.Batches != 2 {
		t.Errorf("partial result: Batches = %d, want the 2 committed batches", res.Batches)
	}
	// The cut-off statement's backend may still be unwinding: wait until
	// no reset statement runs, then look.
	deadline := time.Now().Add(10 * time.Second)
	for scalar[int64](t, db.Pool, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
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
	counts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stateCount])
	if err != nil {
		t.Fatal(err)
	}
	// No row half updated: the cut-off batch is rolled back whole.
	if want := []stateCount{{"delivered/0", 800}, {"pending/1", 200}}; !slices.Equal(counts, want) {
		t.Fatalf("after the cancelled pass: %v, want %v", counts, want)
	}
	invariants(t, db.Pool)

	exec(t, db.Pool, `DROP TRIGGER slow ON outbox.deliveries`)
	next := run(t, newSweeper(t, db.Pool, func(c *sweep.Config) { c.BatchLimit = 100 }))
	if next.Reset != 800 {
		t.Errorf("next pass: Reset = %d, want the remaining 800", next.Reset)
	}
	if n := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 1`); n != 1000 {
		t.Errorf("%d rows reset once, want 1000", n)
	}
	invariants(t, db.Pool)
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
	exec(t, db.Pool, `UPDATE outbox.deliveries SET created_at = now() - interval '1 hour' WHERE id = ANY($1)`, ids[:2])
	res := run(t, newSweeper(t, db.Pool))
	if res.StuckPending != 2 {
		t.Errorf("StuckPending = %d, want 2", res.StuckPending)
	}
	if res.Open != 3 {
		t.Errorf("Open = %d, want 3", res.Open)
	}
	if res.Reset != 0 {
		t.Errorf("Reset = %d, want 0: pending rows are never changed", res.Reset)
	}
	if !res.Woken {
		t.Error("Woken = false, want true (stuck pending rows)")
	}
	if res.OldestOpenAgeS < 3590 || res.OldestOpenAgeS > 3700 {
		t.Errorf("OldestOpenAgeS = %.1f, want about 3600", res.OldestOpenAgeS)
	}
	if n := scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'pending' AND redeliveries = 0 AND attempts = 0`); n != 3 {
		t.Errorf("%d untouched pending rows, want 3", n)
	}
}

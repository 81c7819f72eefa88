package fill

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// Watching: a pass that has caught up keeps looking until its budget ends,
// and hands its lease to the next invocation without a moment unwatched.

func watchConfig() Config {
	cfg := testConfig()
	cfg.Bounded = false
	cfg.Grace = 300 * time.Millisecond
	cfg.Tick = 50 * time.Millisecond
	cfg.PassBudget = 3 * time.Second
	return cfg
}

// latencyBound is what the fill promises for a gap when no older
// transaction is open: the grace, a tick to see the gap, and an allowance
// of a second for the statements.
func latencyBound(cfg Config) time.Duration { return cfg.Grace + cfg.Tick + time.Second }

// gap is a burned sequence and the database time its writer rolled back.
type gap struct {
	seq int64
	at  time.Time
}

// burnGap plays a crashed writer: it allocates one sequence and rolls back,
// and reads the database clock right after (the placeholder's recorded_at
// comes from the same clock).
func burnGap(ctx context.Context, db *testdb.DB) (gap, error) {
	var g gap
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return g, err
	}
	if err := tx.QueryRow(ctx, `SELECT outbox.publish('t', '{"burned":true}')`).Scan(&g.seq); err != nil {
		_ = tx.Rollback(ctx)
		return g, err
	}
	if err := tx.Rollback(ctx); err != nil {
		return g, err
	}
	err = db.Pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&g.at)
	return g, err
}

// fillDelay is how long after its rollback the gap's placeholder was
// written; the test fails when it was not written.
func fillDelay(t *testing.T, db *testdb.DB, g gap) time.Duration {
	t.Helper()
	var recorded time.Time
	var by *string
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT recorded_at, filled_by FROM outbox.events WHERE sequence = $1`, g.seq).Scan(&recorded, &by); err != nil {
		t.Fatalf("sequence %d: %v", g.seq, err)
	}
	if by == nil || *by != "fill" {
		t.Fatalf("sequence %d: filled_by = %s, want fill", g.seq, show(by))
	}
	return recorded.Sub(g.at)
}

func TestGapCreatedWhileWatchingIsFilledByThatPass(t *testing.T) {
	t.Parallel()
	db := startedDB(t)
	cfg := watchConfig()
	await := startPassUntil(t, db, newService(t, db.Pool, cfg, Options{}), holdsLease)
	time.Sleep(3 * cfg.Tick) // the pass is watching a caught-up table
	g, err := burnGap(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	res := await()
	if res.Filled != 1 {
		t.Errorf("Filled = %d, want the gap at %d filled by the watching pass", res.Filled, g.seq)
	}
	if res.Cycles != 1 {
		t.Errorf("Cycles = %d, want 1", res.Cycles)
	}
	if res.Waiting != nil {
		t.Errorf("Waiting = %s, want caught up at the end of the budget", res.WaitingFor())
	}
	if d := fillDelay(t, db, g); d > latencyBound(cfg) {
		t.Errorf("filled %s after the rollback, want within grace + tick + 1s = %s", d, latencyBound(cfg))
	}
	if owner := leaseOwner(t, db); owner != nil {
		t.Errorf("lease_owner = %q after the pass ended, want released", *owner)
	}
}

// Two consecutive invocations, as the schedule starts them: the second
// arrives while the first still watches, is handed the lease within a
// tick, and every gap made across the hand-over is filled as promptly as
// one made in the middle of a pass.
func TestHandOverBetweenInvocationsLeavesNoGapUnwatched(t *testing.T) {
	t.Parallel()
	db := startedDB(t)
	cfg := watchConfig()
	cfg.PassBudget = 4 * time.Second
	s := newService(t, db.Pool, cfg, Options{})

	first := startPassUntil(t, db, s, holdsLease)

	// A crashed writer every 100 ms, from before the second invocation
	// until well after it took over.
	ctx, stop := context.WithCancel(context.Background())
	var (
		mu      sync.Mutex
		gaps    []gap
		burnErr error
		burners sync.WaitGroup
	)
	burners.Go(func() {
		for ctx.Err() == nil {
			g, err := burnGap(context.Background(), db)
			mu.Lock()
			if err != nil {
				burnErr = err
			} else {
				gaps = append(gaps, g)
			}
			mu.Unlock()
			if err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	time.Sleep(700 * time.Millisecond)
	second := runPassInBackground(t, s)
	a := first()
	time.Sleep(1500 * time.Millisecond)
	stop()
	burners.Wait()
	b := second()
	if burnErr != nil {
		t.Fatal(burnErr)
	}

	if !a.HandedOver {
		t.Errorf("the first invocation did not hand over: %v", a)
	}
	if time.Duration(a.DurationMS)*time.Millisecond >= cfg.PassBudget {
		t.Errorf("the first invocation ran %d ms, its whole budget; want it to end at the hand-over", a.DurationMS)
	}
	if b.LeaseWaitMS > (cfg.Tick + time.Second).Milliseconds() {
		t.Errorf("the second invocation waited %d ms for the lease, want about a tick", b.LeaseWaitMS)
	}
	if b.Error != "" {
		t.Errorf("second invocation: %s", b.Error)
	}
	if a.Filled+b.Filled != int64(len(gaps)) {
		t.Errorf("filled %d + %d, want all %d gaps", a.Filled, b.Filled, len(gaps))
	}
	for _, g := range gaps {
		if d := fillDelay(t, db, g); d > latencyBound(cfg) {
			t.Errorf("gap %d filled %s after its rollback, want within %s", g.seq, d, latencyBound(cfg))
		}
	}
	t.Logf("%d gaps across the hand-over; first filled %d, second %d, waited %d ms", len(gaps), a.Filled, b.Filled, b.LeaseWaitMS)
}

// An idle watching pass renews its lease a few times a lease period and
// writes nothing else: with the state unchanged, a renewal is the lease's
// row alone, one statement per tick is the poll, and fill_state is written
// once, by the finish.
func TestIdleWatchingRenewsTheLeaseAlone(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	commit(t, db, 3)
	runPass(t, newService(t, db.Pool, testConfig(), Options{}))
	rec := &recorder{Q: db.Pool}
	cfg := watchConfig()
	cfg.PassBudget = 1500 * time.Millisecond
	res := runPass(t, newService(t, rec, cfg, Options{}))
	wantCaughtUp(t, res)
	renewals := rec.count("leases.renew")
	if renewals < 2 {
		t.Fatalf("%d lease renewals in a %s watching pass, want several", renewals, cfg.PassBudget)
	}
	stateWrites := 0
	for _, q := range rec.statements() {
		if strings.Contains(q, "UPDATE \"outbox\".fill_state") || strings.Contains(q, "fill_state.save") {
			stateWrites++
		}
	}
	if stateWrites != 1 {
		t.Errorf("fill_state written by %d statements of an idle pass (of %d renewals), want once, at the finish", stateWrites, renewals)
	}
	if polls := rec.count("leases.poll"); int64(polls) != int64(res.Ticks) {
		t.Errorf("%d polls for %d ticks: a watching tick is one statement", polls, res.Ticks)
	}
}

package fill

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// The lease between passes: one works at a time, an expired lease is
// taken, a cancelled pass gives it back.
//
// The abandonment proof reads pg_current_snapshot(), which is cluster-wide,
// so a test here that holds an xid across a pass does not call t.Parallel()
// (see fill_test.go).

// Two concurrent invocations: one works, the other returns lease; every
// gap filled exactly once.
func TestConcurrentPassesLease(t *testing.T) {
	t.Parallel()
	db := startedDB(t)
	db.Burn(t, 3)
	commit(t, db, 1)
	db.Burn(t, 2)
	commit(t, db, 1) // 1..8, 5 burned

	cfg := testConfig()
	cfg.Grace = 500 * time.Millisecond
	s := newService(t, db.Pool, cfg, Options{})
	results := make([]*Result, 4)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * 50 * time.Millisecond)
			ctx, cancel := passContext()
			defer cancel()
			res, err := s.RunOnce(ctx, nil)
			if err != nil {
				t.Errorf("pass %d: %v", i, err)
			}
			results[i] = res
		}()
	}
	wg.Wait()
	var filled int64
	workers := 0
	for i, r := range results {
		if r == nil {
			t.Fatalf("pass %d returned no result", i)
		}
		filled += r.Filled
		// A lease loser never read the head: its zero lag must not reach
		// the lag alarm as a metric.
		emitsLag := slices.ContainsFunc(r.Metrics(), func(m metrics.Metric) bool { return m.Name == "Lag" })
		switch waiting(r) {
		case WaitingLease:
			// At once: its one statement is the lease attempt, and it
			// did not sit out the grace the worker waits for.
			if r.Statements != 1 {
				t.Errorf("lease loser %d: Statements = %d, want 1 (the lease attempt); %v", i, r.Statements, r)
			}
			if took := time.Duration(r.DurationMS) * time.Millisecond; took >= cfg.Grace {
				t.Errorf("lease loser %d took %s, want it to return at once, before the %s grace", i, took, cfg.Grace)
			}
			if emitsLag {
				t.Errorf("lease loser %d emits a Lag metric: %v", i, r)
			}
		case "":
			workers++
			if !emitsLag {
				t.Errorf("worker %d emits no Lag metric: %v", i, r)
			}
			if r.Head != 8 {
				t.Errorf("worker %d: Head = %d, want 8", i, r.Head)
			}
		default:
			t.Errorf("pass %d: Waiting = %q, want lease or caught up; %v", i, waiting(r), r)
		}
	}
	if workers != 1 {
		t.Errorf("%d passes worked, want one; %v", workers, results)
	}
	if filled != 5 {
		t.Errorf("the passes filled %d in all, want 5", filled)
	}
	var n int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox.events WHERE filled_by = 'fill'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 5 {
		t.Errorf("%d fill placeholders, want 5", n)
	}
}

// A lease left by a crashed pass blocks only until it expires.
func TestExpiredLeaseIsTaken(t *testing.T) {
	t.Parallel()
	db := startedDB(t)
	testdb.Exec(t, db.Pool, `UPDATE outbox.leases SET owner = 'crashed', expires_at = now() + interval '1 hour' WHERE name = 'fill'`)
	s := newService(t, db.Pool, testConfig(), Options{})
	res := runPass(t, s)
	wantWaiting(t, res, WaitingLease)
	if res.Watermark != 1 {
		t.Errorf("live lease: Watermark = %d, want 1 (reported while waiting on the lease)", res.Watermark)
	}
	testdb.Exec(t, db.Pool, `UPDATE outbox.leases SET expires_at = now() - interval '1 second' WHERE name = 'fill'`)
	wantCaughtUp(t, runPass(t, s)) // the expired lease is taken
}

// The context cancelled mid-pass: the next pass finishes correctly,
// and the grace still counts from the first pass that saw the stall.
func TestCancelledMidPassNextContinues(t *testing.T) {
	t.Parallel()
	db, gap := stallBehindRollback(t)

	cfg := testConfig()
	cfg.Grace = 2 * time.Second
	s := newService(t, db.Pool, cfg, Options{})
	// Cancelled (not a deadline: a deadline would shrink the budget), while
	// the pass waits out the grace: as soon as it has recorded the stall.
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer cancel()
		if err := waitForState(db, sawStall); err != nil {
			t.Error(err)
		}
	}()
	res, err := s.RunOnce(ctx, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce = %v, %v; want the cancellation", res, err)
	}
	var firstSeen time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT cycle_first_seen_at FROM outbox.fill_state`).Scan(&firstSeen); err != nil {
		t.Fatal(err)
	}
	if owner := leaseOwner(t, db); owner != nil {
		t.Errorf("lease_owner = %q, want released by the cancelled pass", *owner)
	}
	res = runPass(t, s)
	wantCaughtUp(t, res)
	counts.Want(t, "next pass", counts.Of("Filled", res.Filled, 1), counts.Of("Watermark", res.Watermark, 3))
	wantPlaceholders(t, rows(t, db), gap)
	// The next pass waited only the rest of the grace, from the persisted first sighting.
	var recorded time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT recorded_at FROM outbox.events WHERE sequence = $1`, gap).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded.Before(firstSeen.Add(cfg.Grace)) {
		t.Errorf("filled at %s, before first sighting %s + grace", recorded, firstSeen)
	}
}

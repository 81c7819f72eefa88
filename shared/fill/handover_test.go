package fill

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// A hand-over never leaves the outbox unwatched: the successor is a real
// process, killed with SIGKILL at each step of taking the lease over, and
// the holder must notice and carry on. These tests time gaps across
// processes, so none runs in parallel.

// burner plays a crashed writer every 100 ms until stopped.
type burner struct {
	stop func()
	wg   sync.WaitGroup
	mu   sync.Mutex
	gaps []gap
	err  error
}

func startBurner(db *testdb.DB) *burner {
	ctx, stop := context.WithCancel(context.Background())
	b := &burner{stop: stop}
	b.wg.Go(func() {
		for ctx.Err() == nil {
			g, err := burnGap(context.Background(), db)
			b.mu.Lock()
			if err != nil {
				b.err = err
			} else {
				b.gaps = append(b.gaps, g)
			}
			b.mu.Unlock()
			if err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return b
}

func (b *burner) finish(t *testing.T) []gap {
	t.Helper()
	b.stop()
	b.wg.Wait()
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.gaps
}

// handOverBound is how long a gap may stay open across a hand-over whose
// successor died: the grace and a tick, the holder's wait for the
// successor's first renewal, and a second for the statements.
func handOverBound(cfg Config) time.Duration {
	return latencyBound(cfg) + pass.AckWindow(cfg.Tick)
}

func TestHandOverSurvivesASuccessorKilledAtEachStep(t *testing.T) {
	for _, step := range []string{"registered", "handed", "taken"} {
		t.Run("killed when "+step, func(t *testing.T) {
			db := startedDB(t)
			cfg := watchConfig()
			cfg.PassBudget = 5 * time.Second
			holder := startPassUntil(t, db, newService(t, db.Pool, cfg, Options{}), holdsLease)
			burns := startBurner(db)

			time.Sleep(300 * time.Millisecond)
			successor := startPassProcess(t, helperSpec{URL: db.URL, Tick: cfg.Tick, Grace: cfg.Grace, Budget: cfg.PassBudget, StopAt: step})
			successor.awaitStep(t, step)
			successor.kill(t)

			// Gaps go on well after the kill, and stop well before the
			// holder's budget ends, so each has the whole bound.
			time.Sleep(2 * time.Second)
			gaps := burns.finish(t)
			res := holder()

			if res.TakenBack != 1 {
				t.Errorf("TakenBack = %d, want the one hand-over to the dead successor taken back; %v", res.TakenBack, res)
			}
			if res.HandedOver {
				t.Errorf("HandedOver = true, want the lease kept from a successor that never acted as owner; %v", res)
			}
			if took := time.Duration(res.DurationMS) * time.Millisecond; took < cfg.PassBudget-time.Second {
				t.Errorf("the holder ran %s of its %s budget, want it to watch on after the successor died", took, cfg.PassBudget)
			}
			if res.Error != "" {
				t.Errorf("holder: %s", res.Error)
			}
			if res.Filled != int64(len(gaps)) {
				t.Errorf("the holder filled %d, want all %d gaps", res.Filled, len(gaps))
			}
			bound := handOverBound(cfg)
			var longest time.Duration
			for _, g := range gaps {
				d := fillDelay(t, db, g)
				if d > bound {
					t.Errorf("gap %d filled %s after its rollback, want within %s", g.seq, d, bound)
				}
				longest = max(longest, d)
			}
			if owner := leaseOwner(t, db); owner != nil {
				t.Errorf("lease_owner = %q after the holder ended, want released", *owner)
			}
			t.Logf("successor killed when %s: %d gaps filled by the holder, the longest open %s (bound %s); taken back %d",
				step, len(gaps), longest, bound, res.TakenBack)
		})
	}
}

// A holder killed outright: the next invocation, already waiting as its
// successor, takes the lease over once it expires, a few ticks after the
// holder's last renewal, and fills what came meanwhile. With the default
// tick, as deployed.
func TestKilledHoldersLeaseIsTakenOverWithinAFewTicks(t *testing.T) {
	db := startedDB(t)
	cfg := watchConfig()
	cfg.Tick, cfg.PassBudget = DefaultTick, 8*time.Second
	// The documented lease at the default tick: a few ticks, not the
	// pass's own computation of it.
	ttl := pass.LeaseTicks * cfg.Tick

	holder := startPassProcess(t, helperSpec{URL: db.URL, Tick: cfg.Tick, Grace: cfg.Grace, Budget: 20 * time.Second})
	holder.awaitStep(t, "taken")
	time.Sleep(3 * cfg.Tick) // watching, renewing
	holder.kill(t)
	g, err := burnGap(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}

	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	// The lease lasts ttl after the holder's last renewal, which was at
	// most a third of it before the kill; a poll to notice.
	if limit := ttl + pass.LeasePoll + cfg.Tick; time.Duration(res.LeaseWaitMS)*time.Millisecond > limit {
		t.Errorf("the next pass waited %d ms for the dead holder's lease, want within %s (%d ticks and a poll)", res.LeaseWaitMS, limit, pass.LeaseTicks+1)
	}
	if res.Filled != 1 {
		t.Errorf("Filled = %d, want the gap at %d made after the kill; %v", res.Filled, g.seq, res)
	}
	if d, bound := fillDelay(t, db, g), ttl+latencyBound(cfg); d > bound {
		t.Errorf("gap %d filled %s after its rollback, want within the lease and the usual bound, %s", g.seq, d, bound)
	}
	t.Logf("a killed holder's lease taken over after %d ms (lease %s)", res.LeaseWaitMS, ttl)
}

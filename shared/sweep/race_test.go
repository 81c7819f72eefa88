package sweep_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// Sweeps racing each other and the relay: each row moves once, and an
// acked row never moves.

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
	if bad := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state <> 'pending' OR redeliveries <> 1`); bad != 0 {
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
	swept := race(t, start, &relays, fail, sweeps)

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
	resetRows := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE redeliveries = 1`)
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
	swept := race(t, start, &relays, fail, sweeps)
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

// race releases the sweeps and relays waiting on start, waits for them
// all, fails t on the first error a relay sent on fail, and returns what
// the sweeps reset.
func race(t *testing.T, start chan struct{}, relays *sync.WaitGroup, fail chan error, sweeps func() []*sweep.Result) int64 {
	t.Helper()
	close(start)
	relays.Wait()
	close(fail)
	for err := range fail {
		t.Fatalf("relay: %v", err)
	}
	return resetTotal(sweeps())
}

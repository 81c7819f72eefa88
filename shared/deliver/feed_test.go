package deliver

import (
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/webhooktest"
)

// While one push hangs, the other workers go on with the next batches,
// and each of those is acked as soon as its own pushes return: no lane
// waits for the slowest push of a batch.
func TestAHangingPushDoesNotHoldUpTheNextBatches(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	const n, batch = 30, 5
	release := make(chan struct{})
	var once sync.Once
	var mu sync.Mutex
	first := true
	rcv.Answer(func(_ webhooktest.Request, w http.ResponseWriter) {
		mu.Lock()
		hang := first
		first = false
		mu.Unlock()
		if hang {
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'hook', 'k', '{}'::bytea FROM generate_series(1, $1)`, n)
	cfg := hookConfig(rcv, newSecret(t, "key"))
	cfg.BatchLimit, cfg.Concurrency, cfg.PassBudget = batch, 2, 40*time.Second
	s := newTestService(t, db, cfg)
	done := make(chan *Result, 1)
	go func() {
		res, _ := s.RunOnce(t.Context(), nil)
		done <- res
	}()

	// Every batch but the hanging push's is pushed and acked while it
	// hangs, or the wait gives up.
	acked := func() int64 {
		return testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state = 'acked'`)
	}
	var ackedWhileHanging int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ackedWhileHanging = acked(); ackedWhileHanging >= n-batch {
			break
		}
	}
	requestsWhileHanging := len(rcv.Requests())
	once.Do(func() { close(release) })
	res := <-done

	if requestsWhileHanging != n {
		t.Errorf("%d deliveries were pushed while one push hung, want all %d", requestsWhileHanging, n)
	}
	if ackedWhileHanging < n-batch {
		t.Errorf("%d deliveries were acked while one push hung, want at least %d (every batch but its own)", ackedWhileHanging, n-batch)
	}
	if res == nil || res.Delivered != n {
		t.Errorf("the pass delivered %v, want %d once the push returned", res, n)
	}
}

// Never more pushes in flight than DELIVER_CONCURRENCY, across batches.
func TestPushesInFlightStayWithinTheConcurrency(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	const n, concurrency = 40, 3
	var mu sync.Mutex
	inFlight, most := 0, 0
	rcv.Answer(func(_ webhooktest.Request, w http.ResponseWriter) {
		mu.Lock()
		inFlight++
		most = max(most, inFlight)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		inFlight--
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'hook', 'k', '{}'::bytea FROM generate_series(1, $1)`, n)
	cfg := hookConfig(rcv, newSecret(t, "key"))
	cfg.BatchLimit, cfg.Concurrency = 10, concurrency
	if r := runPass(t, newTestService(t, db, cfg)); r.Delivered != n {
		t.Errorf("delivered %d, want %d", r.Delivered, n)
	}
	mu.Lock()
	defer mu.Unlock()
	if most > concurrency {
		t.Errorf("%d pushes were in flight at once, want at most %d", most, concurrency)
	}
}

// On a FIFO queue, each tenant's deliveries arrive in the order they were
// enqueued, across batches pushed at once by several workers.
func TestATenantsDeliveriesReachAFIFOQueueInOrder(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	c := sqstest.Client(t)
	url := sqstest.NewQueue(t, c, "deliver-order", map[string]string{"FifoQueue": "true"})
	addRecipient(t, db, "ordered", url)
	const n = 120
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, tenant_id, payload)
		SELECT 'ordered', 'k', 't' || g % 3, '{}'::bytea FROM generate_series(1, $1) g ORDER BY g`, n)
	r := runPass(t, newTestService(t, db, Config{Bounded: true, BatchLimit: 7, Concurrency: 4, PassBudget: 20 * time.Second}))
	if r.Delivered != n {
		t.Fatalf("delivered %d, want %d (%s)", r.Delivered, n, r.LastError)
	}
	msgs := sqstest.Drain(t, c, url, n, 20*time.Second)
	if len(msgs) != n {
		t.Fatalf("the queue gave %d messages, want %d", len(msgs), n)
	}
	last := map[string]int64{}
	for _, m := range msgs {
		var env struct {
			ID     int64  `json:"delivery_id"`
			Tenant string `json:"tenant_id"`
		}
		if err := json.Unmarshal([]byte(*m.Body), &env); err != nil {
			t.Fatalf("not the envelope: %s", *m.Body)
		}
		if env.ID < last[env.Tenant] {
			t.Errorf("tenant %s: delivery %d arrived after %d", env.Tenant, env.ID, last[env.Tenant])
		}
		last[env.Tenant] = max(last[env.Tenant], env.ID)
	}
}

// A watching pass that hands over mid-backlog first pushes and settles
// every delivery it claimed: each arrives once, and none is left delivered
// for the sweep.
func TestAHandOverMidBacklogPushesWhatWasClaimedFirst(t *testing.T) {
	t.Parallel()
	db, rcv := hookScene(t)
	const n = 300
	rcv.Answer(func(_ webhooktest.Request, w http.ResponseWriter) {
		time.Sleep(10 * time.Millisecond)
		w.WriteHeader(http.StatusNoContent)
	})
	db.Exec(t, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'hook', 'k', '{}'::bytea FROM generate_series(1, $1)`, n)
	cfg := hookConfig(rcv, newSecret(t, "key"))
	cfg.Bounded, cfg.Concurrency, cfg.BatchLimit, cfg.PassBudget = false, 2, 10, 4*time.Second
	first, second := newTestService(t, db, cfg), newTestService(t, db, cfg)
	done := make(chan *Result, 1)
	go func() {
		res, _ := first.RunOnce(t.Context(), nil)
		done <- res
	}()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(rcv.Requests()) < 20; {
		time.Sleep(10 * time.Millisecond)
	}
	late, err := second.RunOnce(t.Context(), nil)
	if err != nil {
		t.Fatalf("the second pass: %v", err)
	}
	early := <-done
	if !early.HandedOver {
		t.Errorf("the first pass did not hand over (delivered %d)", early.Delivered)
	}
	if late.Delivered == 0 {
		t.Errorf("the second pass delivered nothing after the hand-over")
	}
	wantEachOnce(t, rcv, n)
	if open := testdb.Scalar[int64](t, db.Pool, `SELECT count(*) FROM outbox.deliveries WHERE state <> 'acked'`); open != 0 {
		t.Errorf("%d deliveries are not acked, want none", open)
	}
}

package relay

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

func runPass(t *testing.T, s *Service) *Result {
	t.Helper()
	res, err := s.RunOnce(context.Background(), nil)
	if err != nil {
		t.Fatalf("RunOnce: %v (%s)", err, pass.String(res))
	}
	return res
}

// A watching relay with nothing to send costs one statement a tick (the
// lease poll carrying its probe), plus the lease's renewal every third of
// its period and the pass's first and last statements, however many
// events it has passed.
func TestIdleTickIsOneStatement(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-idle", nil)
	publish(t, db, "a", "", payloads(2000)...)
	s := newTestService(t, db, Config{Target: url, Tick: 50 * time.Millisecond, PassBudget: 1500 * time.Millisecond, BatchLimit: 500})
	if r := runPass(t, s); r.Sent != 2000 {
		t.Fatalf("the backlog: sent %d, want 2000", r.Sent)
	}
	r := runPass(t, s)
	if r.Sent != 0 || r.Ticks < 10 {
		t.Fatalf("idle pass: sent %d ticks %d, want 0 and many", r.Sent, r.Ticks)
	}
	ttl := pass.LeaseTTL(50 * time.Millisecond)
	renewals := int64(1500*time.Millisecond/(ttl/3)) + 1
	// Taking the lease, and giving it back.
	if extra := r.Statements - int64(r.Ticks); extra > renewals+2 {
		t.Errorf("%d statements for %d ticks: %d beyond one a tick, want at most %d (renewals) + 2", r.Statements, r.Ticks, extra, renewals)
	}
}

func payloads(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = `{"n":1}`
	}
	return out
}

// RELAY_START=latest starts a new relay at the fill watermark it first
// sees: what was there before is not sent, what comes after is.
func TestStartLatestBeginsAtTheWatermark(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-latest", nil)
	publish(t, db, "a", "", payloads(5)...)
	db.Exec(t, `UPDATE outbox.fill_state SET started = true, watermark = 5`)
	s := newTestService(t, db, Config{Target: url, Start: StartLatest, Bounded: true})
	if r := runPass(t, s); r.Position != 5 || r.Sent != 0 {
		t.Errorf("first pass: position %d sent %d, want 5 and 0", r.Position, r.Sent)
	}
	publish(t, db, "a", "", `{"n":6}`)
	if r := runPass(t, s); r.Position != 6 || r.Sent != 1 {
		t.Errorf("second pass: position %d sent %d, want 6 and 1", r.Position, r.Sent)
	}
	if got := drain(t, url, 2, 2*time.Second); len(got) != 1 || got[0].seq != 6 {
		t.Errorf("the queue received %v, want 6 only", got)
	}
}

// A connection lost between the target's answer and the commit is a
// transient error: the pass takes its lease again, keeps the batch in hand
// and commits it, sending nothing twice.
func TestLostConnectionAfterTheSendKeepsTheBatchInHand(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-lost", nil)
	publish(t, db, "a", "", payloads(30)...)
	ctx := context.Background()
	// Straight to the server even under OUTBOXKEEPER_TEST_VIA=pgbouncer:
	// PgBouncer replaces a server connection that died, and the pass would
	// never see the loss this test is about.
	cfg, err := pgxpool.ParseConfig(db.DirectURL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "relay-lost-connection"
	// As the functions' pool (internal/pg): no server-side prepared
	// statement, which a transaction pooler cannot keep.
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s := newTestService(t, db, Config{Target: url, Bounded: true, Tick: 50 * time.Millisecond})
	s.kit.DB = pool
	// Straight to the server, so that through PgBouncer this statement's
	// own server connection is not among those it ends.
	admin := db.Connect(t)
	once := false
	s.afterSend = func() {
		if once {
			return
		}
		once = true
		testdb.Exec(t, admin, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE application_name = 'relay-lost-connection' AND pid <> pg_backend_pid()`)
	}
	r := runPass(t, s)
	if r.Retries < 1 {
		t.Errorf("retries %d, want the lost connection retried", r.Retries)
	}
	if r.Sent != 30 || r.Position != 30 {
		t.Errorf("sent %d position %d, want 30 and 30: the batch once", r.Sent, r.Position)
	}
	if got := drain(t, url, 31, 3*time.Second); len(got) != 30 {
		t.Errorf("the queue received %d messages, want 30", len(got))
	}
}

// A batch larger than a round goes in rounds, each committed before the
// next is sent: a crash or a hand-over repeats at most a round, and no send
// outlasts the lease.
func TestALargeBatchIsSentAndCommittedRoundByRound(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := sqstest.NewQueue(t, sqstest.Client(t), "relay-rounds", nil)
	publish(t, db, "a", "", payloads(500)...)
	s := newTestService(t, db, Config{Target: url, Bounded: true, Concurrency: 1})
	if s.round != 100 {
		t.Fatalf("round of %d messages, want 100 (10 calls of 10, one lane)", s.round)
	}
	var committed []int64
	s.afterSend = func() {
		committed = append(committed, testdb.Scalar[int64](t, db.Pool, `SELECT position FROM outbox.consumers WHERE name = 'relay:default'`))
	}
	r := runPass(t, s)
	if r.Sent != 500 || r.Position != 500 || r.Batches != 1 {
		t.Errorf("sent %d position %d batches %d, want 500, 500, 1", r.Sent, r.Position, r.Batches)
	}
	if len(committed) != 5 {
		t.Fatalf("%d rounds, want 5 (500 in rounds of 100)", len(committed))
	}
	for i, c := range committed {
		if want := int64(100 * i); c != want {
			t.Errorf("before round %d the committed position was %d, want %d", i+1, c, want)
		}
	}
}

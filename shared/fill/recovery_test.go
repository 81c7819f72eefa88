package fill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/syncbuf"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// What a pass does when the database misbehaves: a statement blocked on a
// lock, a connection killed, a restart, a marker from another cluster.
// These tests hold locks or xids, or restart the server, so none of them
// runs in parallel (see fill_test.go).

// lockedBy holds sql (a lock) open in a transaction of its own until the
// test ends.
func lockedBy(t *testing.T, db *testdb.DB, sql string) {
	t.Helper()
	ctx := context.Background()
	conn := db.Connect(t)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// loggedPass runs one pass through Handle, as Lambda would, and returns
// its response and log output.
func loggedPass(t *testing.T, s *Service) (*Result, string) {
	t.Helper()
	var logs syncbuf.Buffer
	s.kit.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	ctx, cancel := passContext()
	defer cancel()
	res, err := s.Handle(ctx, nil)
	if err != nil {
		t.Fatalf("Handle: %v\nlogs:\n%s", err, logs.String())
	}
	return res, logs.String()
}

func assertEndedOnBudget(t *testing.T, res *Result, logs string, budget time.Duration) {
	t.Helper()
	if res.WaitingFor() != WaitingBudget {
		t.Errorf("Waiting = %q, want budget", res.WaitingFor())
	}
	if !strings.Contains(res.TimedOut, "statement timeout") {
		t.Errorf("TimedOut = %q, want the statement the budget ended", res.TimedOut)
	}
	if took := time.Duration(res.DurationMS) * time.Millisecond; took > budget+pass.FinishAllowance+time.Second {
		t.Errorf("the pass took %s, want its budget %s and the finish", took, budget)
	}
	if !strings.Contains(logs, `"msg":"fill pass"`) {
		t.Errorf("no pass log line:\n%s", logs)
	}
	if !strings.Contains(logs, `"timed_out"`) {
		t.Errorf("no log naming the timed-out statement:\n%s", logs)
	}
}

func TestLockedFillStateEndsThePassOnItsBudget(t *testing.T) {
	db := startedDB(t)
	lockedBy(t, db, `SELECT * FROM outbox.fill_state FOR UPDATE`)
	cfg := testConfig()
	cfg.PassBudget = time.Second
	res, logs := loggedPass(t, newService(t, db.Pool, cfg, Options{}))
	assertEndedOnBudget(t, res, logs, cfg.PassBudget)
}

func TestLockedEventsEndThePassOnItsBudget(t *testing.T) {
	db := startedDB(t)
	db.Burn(t, 1)
	lockedBy(t, db, `LOCK TABLE outbox.events IN ACCESS EXCLUSIVE MODE`)
	cfg := testConfig()
	cfg.PassBudget = time.Second
	res, logs := loggedPass(t, newService(t, db.Pool, cfg, Options{}))
	assertEndedOnBudget(t, res, logs, cfg.PassBudget)
	if owner := leaseOwner(t, db); owner != nil {
		t.Errorf("lease_owner = %q, want the lease given back after the blocked read", *owner)
	}
}

// The function's connection killed with pg_terminate_backend while it
// polls the proof: the same invocation dials afresh, keeps its marker and
// fills the gap once the writer is gone.
func TestConnectionKilledMidProofSameInvocationRecovers(t *testing.T) {
	db, w, gapSeq := stallBehindOpenWriter(t)

	app := "okt-fill-kill-" + db.Name
	cfg := testConfig()
	cfg.Grace, cfg.PassBudget = pass.Off, 8*time.Second
	await := startPassUntil(t, db, newService(t, db.NewPool(t, app), cfg, Options{}), pollsProof)
	if killed := db.KillSessions(t, app); killed == 0 {
		t.Fatal("found none of the pass's connections to kill")
	}
	if _, ok := rows(t, db)[gapSeq]; ok {
		t.Fatal("filled while the writer runs")
	}
	w.rollback()
	res := await()
	// Behind PgBouncer the pooler meets the killed server connection and
	// dials another for the next transaction; only a statement caught in
	// flight reaches the pass as an error.
	if res.Retries < 1 && !testdb.ViaPooler() {
		t.Errorf("Retries = %d, want the killed connection retried", res.Retries)
	}
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 1, "the gap filled by the same invocation"),
		counts.Of("MarkersTaken", res.MarkersTaken, 1, "the one marker kept across the retry"),
	)
	wantPlaceholders(t, rows(t, db), gapSeq)
}

// pg_ctl restart -m fast in the middle of a pass: the same invocation
// waits for the server within its budget and finishes; nothing committed
// is lost or overwritten.
func TestRestartMidPassSameInvocationRecovers(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	db := startedDB(t)
	commit(t, db, 3)
	gapSeq, _ := db.Burn(t, 1)
	commit(t, db, 2)
	before := rows(t, db)

	cfg := testConfig()
	cfg.Grace, cfg.PassBudget = time.Second, 20*time.Second
	await := startPassUntil(t, db, newService(t, db.Pool, cfg, Options{}), sawStall)
	out, err := osexec.Command("bash", filepath.Join(root, "infra", "stack", "pg-restart.sh")).CombinedOutput()
	var exit *osexec.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 2 {
		testenv.Missing(t, strings.TrimSpace(string(out)))
	}
	if err != nil {
		t.Fatalf("restart: %v\n%s", err, out)
	}
	res := await()
	// Behind PgBouncer the restart can pass unseen: the pooler dials the
	// server afresh for the next transaction, and only a statement caught
	// in flight sees an error.
	if res.Retries < 1 && !testdb.ViaPooler() {
		t.Errorf("Retries = %d, want the restart retried", res.Retries)
	}
	if res.Filled != 1 {
		t.Errorf("Filled = %d, want the gap at %d filled by the same invocation", res.Filled, gapSeq)
	}
	after := rows(t, db)
	wantKept(t, before, after, "the restart")
	wantPlaceholders(t, after, gapSeq)
}

// §3.7: a persisted marker at or above the snapshot's xmax was never
// assigned here (state restored from elsewhere). The pass discards it,
// says so, takes a fresh one and fills.
func TestForeignMarkerIsDiscardedAndRetaken(t *testing.T) {
	db := startedDB(t)
	gapSeq, _ := db.Burn(t, 1)
	top := commit(t, db, 1)
	testdb.Exec(t, db.Pool, `UPDATE outbox.fill_state SET cycle_from = 1, cycle_first_seen_at = now() - interval '1 hour',
		cycle_marker = (pg_snapshot_xmax(pg_current_snapshot())::text::bigint + 1000000000)::text::xid8,
		cycle_marker_head = $1`, top)

	cfg := testConfig()
	cfg.PassBudget = 3 * time.Second
	res, logs := loggedPass(t, newService(t, db.Pool, cfg, Options{}))
	counts.Want(t, "", counts.Of("ForeignMarkers", res.ForeignMarkers, 1), counts.Of("MarkersTaken", res.MarkersTaken, 1, "a fresh marker"))
	if res.Filled != 1 {
		t.Errorf("Filled = %d, want the gap at %d filled: %v", res.Filled, gapSeq, res)
	}
	if !strings.Contains(logs, "not this cluster's") {
		t.Errorf("no log line about the discarded marker:\n%s", logs)
	}
}

// lostAnswer is a pass.DB whose first statement matching lose is lost
// with its connection, as a crash loses one: the caller gets the error
// pgx returns for a batch on a connection that died under it. With sent,
// the statement ran on the server and committed first (only the answer is
// lost); without, it never arrived.
type lostAnswer struct {
	pass.DB
	lose func(sql string) bool
	sent bool
	lost atomic.Bool
}

func (l *lostAnswer) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if l.lose(q.SQL) && l.lost.CompareAndSwap(false, true) {
			if l.sent {
				if err := l.DB.SendBatch(ctx, b).Close(); err != nil {
					return failedBatch{err}
				}
			}
			return failedBatch{fmt.Errorf("%w", pgconn.ErrConnClosed)}
		}
	}
	return l.DB.SendBatch(ctx, b)
}

type failedBatch struct{ err error }

func (f failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f failedBatch) QueryRow() pgx.Row                { return errRowOf{f.err} }
func (f failedBatch) Close() error                     { return nil }
func (f failedBatch) Tx() pgx.Tx                       { return nil }

type errRowOf struct{ err error }

func (r errRowOf) Scan(...any) error { return r.err }

// A pass that took the lease but lost the answer with its connection, and
// whose budget ends before it hears back: it does not know it holds the
// lease, and gives it back anyway on its way out, so the next pass does
// not wait for it to expire.
func TestLeaseTakenWithTheAnswerLostIsGivenBack(t *testing.T) {
	db := startedDB(t)
	cfg := testConfig()
	cfg.PassBudget, cfg.Tick = 150*time.Millisecond, 200*time.Millisecond
	lossy := &lostAnswer{DB: db.Pool, sent: true, lose: func(sql string) bool { return strings.Contains(sql, "leases.acquire") }}
	s := newService(t, lossy, cfg, Options{})
	ctx, cancel := passContext()
	defer cancel()
	res, err := s.RunOnce(ctx, nil)
	if !lossy.lost.Load() {
		t.Fatal("the lease statement's answer was never lost")
	}
	if !errors.Is(err, pgconn.ErrConnClosed) {
		t.Errorf("RunOnce = %v, want the lost connection's error: the budget ended before the database answered", err)
	}
	if owner := leaseOwner(t, db); owner != nil {
		t.Errorf("lease_owner = %q after the pass, want it given back", *owner)
	}
	next := runPass(t, newService(t, db.Pool, testConfig(), Options{}))
	if next.WaitingFor() == WaitingLease {
		t.Errorf("the next pass waits for the lease: %v", next)
	}
	t.Logf("lost-answer pass: %v", res)
}

// The last statement (the state and the lease given back) lost to a
// dropped connection is sent again within the finish allowance: the pass
// ends normally and the lease is free.
func TestFinishIsRetriedAfterALostConnection(t *testing.T) {
	db := startedDB(t)
	lossy := &lostAnswer{DB: db.Pool, lose: func(sql string) bool { return strings.Contains(sql, "leases.finish") }}
	res := runPass(t, newService(t, lossy, testConfig(), Options{}))
	if !lossy.lost.Load() {
		t.Fatal("the finish was never lost")
	}
	if res.Error != "" {
		t.Errorf("Error = %q, want none: the finish was sent again", res.Error)
	}
	if owner := leaseOwner(t, db); owner != nil {
		t.Errorf("lease_owner = %q after the pass, want it given back", *owner)
	}
}

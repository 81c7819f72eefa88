package fill

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// Operator placeholders (`outboxkeeper skip-stall`, filled_by 'operator')
// are present rows like the fill's own: the watermark passes them, and the
// pass counts them once in OperatorFilled.

func skipTo(t *testing.T, db *testdb.DB, to int64) store.Skip {
	t.Helper()
	s, err := store.NewSkips(store.MustSchema("outbox")).Skip(context.Background(), db.Pool, store.SkipParams{To: to, Reason: "test", Operator: "tester"})
	if err != nil {
		t.Fatalf("skip to %d: %v", to, err)
	}
	return s
}

func TestWatermarkPassesOperatorPlaceholders(t *testing.T) {
	t.Parallel()
	db, gap := stallBehindRollback(t)
	skip := skipTo(t, db, gap+1)

	res := runPass(t, newService(t, db.Pool, testConfig(), Options{}))
	wantCaughtUp(t, res)
	if res.Watermark != gap+1 {
		t.Errorf("Watermark = %d, want %d (past the operator placeholder at %d)", res.Watermark, gap+1, gap)
	}
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 0, "the operator wrote the placeholder"),
		counts.Of("MarkersTaken", res.MarkersTaken, 0, "nothing was left to prove"),
	)
	if res.OperatorFilled != skip.Written {
		t.Errorf("OperatorFilled = %d, want the skip's %d", res.OperatorFilled, skip.Written)
	}
	if !slices.Contains(res.Metrics(), metrics.Metric{Name: "OperatorFilled", Unit: metrics.Count, Value: float64(skip.Written)}) {
		t.Errorf("Metrics() = %v, want OperatorFilled %d", res.Metrics(), skip.Written)
	}

	again := runPass(t, newService(t, db.Pool, testConfig(), Options{}))
	if again.OperatorFilled != 0 {
		t.Errorf("the next pass: OperatorFilled = %d, want 0 (each skip is counted once)", again.OperatorFilled)
	}
}

// A cycle whose proof is blocked by a session that holds an xid ends when
// an operator skips its range: the next pass moves the watermark over the
// skipped sequences, forgets the cycle and its blocked proof, and writes
// nothing itself.
//
// Not parallel: the blocking session holds an xid across passes.
func TestSkipEndsABlockedCycle(t *testing.T) {
	db := startedDB(t)
	blocker := openWriter(t, db)
	if _, err := blocker.tx.Exec(context.Background(), `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	defer blocker.rollback()
	gap, _ := db.Burn(t, 1)
	top := commit(t, db, 1)

	cfg := testConfig()
	cfg.Grace = pass.Off
	cfg.PassBudget = 500 * time.Millisecond
	blocked := runPass(t, newService(t, db.Pool, cfg, Options{}))
	wantWaiting(t, blocked, WaitingProof)
	if !slices.ContainsFunc(blocked.BlockedBy, func(b Blocker) bool { return b.PID == blocker.pid }) {
		t.Fatalf("BlockedBy = %+v, want the blocking session %d", blocked.BlockedBy, blocker.pid)
	}

	skipTo(t, db, top)
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	wantCaughtUp(t, res)
	if res.Watermark != top {
		t.Errorf("Watermark = %d, want %d", res.Watermark, top)
	}
	if res.Cycle != nil {
		t.Errorf("Cycle = %+v, want none", res.Cycle)
	}
	if res.ProofBlockedSeconds != 0 {
		t.Errorf("ProofBlockedSeconds = %v, want 0", res.ProofBlockedSeconds)
	}
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0", res.Filled)
	}
	if r := rows(t, db)[gap]; r.FilledBy == nil || *r.FilledBy != store.FilledByOperator {
		t.Errorf("sequence %d: filled_by %s, want operator", gap, show(r.FilledBy))
	}
}

package fill

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// The fill's cycles (grace, marker, proof, fill), each against a fresh
// real database; the §3 rules are in rules_test.go, the first run in
// anchor_test.go, the lease in lease_test.go and handover_test.go.
//
// The abandonment proof reads pg_current_snapshot(), which is cluster-wide:
// a transaction left open in one test's database holds back the proof of
// every other test's pass. So a test that holds an xid across a pass (an
// open writer, a prepared transaction, a long insert) does not call
// t.Parallel(): Go runs such tests one at a time, before and never beside
// the parallel ones, whose own transactions are short.

// A rolled-back writer's sequence is filled after the grace and not before.
func TestRolledBackWriterFilledAfterGrace(t *testing.T) {
	t.Parallel()
	db, gap := stallBehindRollback(t)

	clk := &clock{}
	cfg := testConfig()
	cfg.Grace, cfg.PassBudget = 10*time.Second, time.Second
	s := newService(t, db.Pool, cfg, Options{Options: pass.Options{Now: clk.Now}})

	// Inside the grace.
	res := runPass(t, s)
	wantWaiting(t, res, WaitingGrace)
	if res.Filled != 0 {
		t.Errorf("inside the grace: Filled = %d, want 0", res.Filled)
	}
	wantStalledAt(t, "inside the grace", res, gap)
	if _, ok := rows(t, db)[gap]; ok {
		t.Fatal("a placeholder was written before the grace ended")
	}
	if res.Cycle == nil {
		t.Fatalf("inside the grace: Cycle = null, want the stall's cycle; %v", res)
	}
	firstSeen := res.Cycle.FirstSeenAt

	// 5s later, still inside: the grace counts from the first pass.
	clk.Advance(5 * time.Second)
	res = runPass(t, s)
	wantWaiting(t, res, WaitingGrace)
	if res.Filled != 0 {
		t.Errorf("5s later: Filled = %d, want 0", res.Filled)
	}
	if res.Cycle == nil || !res.Cycle.FirstSeenAt.Equal(firstSeen) {
		t.Errorf("5s later: Cycle = %+v, want first_seen_at %s kept from the first pass", res.Cycle, firstSeen)
	}

	// After the grace.
	clk.Advance(5 * time.Second)
	res = runPass(t, s)
	wantCaughtUp(t, res)
	counts.Want(t, "after the grace", counts.Of("Filled", res.Filled, 1), counts.Of("Watermark", res.Watermark, 3))
	if res.StalledAt != nil {
		t.Errorf("after the grace: StalledAt = %d, want null", *res.StalledAt)
	}
	if res.Cycle != nil {
		t.Errorf("after the grace: Cycle = %+v, want null", res.Cycle)
	}
	wantPlaceholders(t, rows(t, db), gap)
}

// A grace that fits in the budget is waited out inside one pass.
func TestGraceWaitedOutInsideThePass(t *testing.T) {
	t.Parallel()
	db, gap := stallBehindRollback(t)

	cfg := testConfig()
	cfg.Grace = 400 * time.Millisecond
	begin := time.Now()
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	took := time.Since(begin)
	wantCaughtUp(t, res)
	counts.Want(t, "", counts.Of("Filled", res.Filled, 1, "the gap filled by the same pass"), counts.Of("Watermark", res.Watermark, 3))
	if took < cfg.Grace {
		t.Errorf("filled after %s, before the %s grace", took, cfg.Grace)
	}
	wantPlaceholders(t, rows(t, db), gap)
}

// A stall that resolves inside the grace (late commit) keeps the real
// event and writes no placeholder.
func TestLateCommitInsideGraceWritesNothing(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db, w, late := stallBehindOpenWriter(t)

	cfg := testConfig()
	cfg.Grace = 2 * time.Second
	await := startPassUntil(t, db, newService(t, db.Pool, cfg, Options{}), sawStall)
	w.commit()
	res := await()
	wantCaughtUp(t, res)
	counts.Want(t, "",
		counts.Of("Filled", res.Filled, 0),
		counts.Of("Watermark", res.Watermark, 3),
		counts.Of("MarkersTaken", res.MarkersTaken, 0, "the stall resolved inside its grace"),
	)
	wantReal(t, rows(t, db), late, "the real event")
}

// A writer still open when the grace ends: no fill while it runs and
// blocked_by names it; after it rolls back the gap is filled.
func TestOpenWriterBlocksThenRollsBack(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db, w, gap := stallBehindOpenWriter(t)

	cfg := testConfig()
	cfg.PassBudget = time.Second
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	wantWaiting(t, res, WaitingProof)
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0 while the writer runs", res.Filled)
	}
	wantStalledAt(t, "", res, gap)
	if len(res.BlockedBy) == 0 {
		t.Fatalf("BlockedBy is empty, want the writer (pid %d) first", w.pid)
	}
	b := res.BlockedBy[0]
	if b.PID != w.pid {
		t.Errorf("BlockedBy[0].PID = %d, want the writer's %d; %+v", b.PID, w.pid, res.BlockedBy)
	}
	if b.BackendXID == "" {
		t.Errorf("BlockedBy[0].BackendXID is empty, want the writer's xid: %+v", b)
	}
	if b.State == "" {
		t.Errorf("BlockedBy[0].State is empty, want the writer's state: %+v", b)
	}
	if b.XactAgeSeconds == nil {
		t.Errorf("BlockedBy[0].XactAgeSeconds = null, want the writer's age: %+v", b)
	}
	if res.ProofBlockedSeconds < 0 {
		t.Errorf("ProofBlockedSeconds = %v, want >= 0", res.ProofBlockedSeconds)
	}
	if res.Cycle == nil || res.Cycle.Marker == nil {
		t.Fatalf("Cycle = %+v, want a cycle keeping its marker", res.Cycle)
	}
	marker := *res.Cycle.Marker
	if _, ok := rows(t, db)[gap]; ok {
		t.Fatal("filled while the writer runs")
	}
	out, _ := json.Marshal(res)
	if !strings.Contains(string(out), fmt.Sprintf(`"pid":%d`, w.pid)) {
		t.Errorf("response JSON does not name the writer: %s", out)
	}

	// Still blocked: same marker (one per cycle, not per retry).
	res = runPass(t, s)
	wantWaiting(t, res, WaitingProof)
	if res.MarkersTaken != 0 {
		t.Errorf("second blocked pass: MarkersTaken = %d, want 0 (the cycle keeps its marker)", res.MarkersTaken)
	}
	if res.Cycle == nil || res.Cycle.Marker == nil || *res.Cycle.Marker != marker {
		t.Errorf("second blocked pass: Cycle = %+v, want the same marker %d", res.Cycle, marker)
	}
	if res.ProofBlockedSeconds <= 0 {
		t.Errorf("second blocked pass: ProofBlockedSeconds = %v, want it growing above 0", res.ProofBlockedSeconds)
	}
	if res.ForeignMarkers != 0 {
		t.Errorf("second blocked pass: ForeignMarkers = %d, want 0: a legitimate blocked marker was taken for a foreign one", res.ForeignMarkers)
	}

	w.rollback()
	res = runPass(t, s)
	wantCaughtUp(t, res)
	counts.Want(t, "after rollback",
		counts.Of("Filled", res.Filled, 1),
		counts.Of("MarkersTaken", res.MarkersTaken, 0, "the gap filled on the kept marker"),
	)
	if res.ProofBlockedSeconds != 0 {
		t.Errorf("after rollback: ProofBlockedSeconds = %v, want 0", res.ProofBlockedSeconds)
	}
	wantPlaceholders(t, rows(t, db), gap)
}

// The twin: the writer commits while the pass polls the proof; the
// proof then passes, the insert meets the committed row, and DO NOTHING
// keeps the real event.
func TestOpenWriterCommitsDuringProof(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db, w, seq := stallBehindOpenWriter(t)

	cfg := testConfig()
	cfg.Grace = pass.Off
	cfg.PassBudget = 5 * time.Second
	await := startPassUntil(t, db, newService(t, db.Pool, cfg, Options{}), pollsProof)
	w.commit()
	res := await()
	wantCaughtUp(t, res)
	counts.Want(t, "", counts.Of("Filled", res.Filled, 0), counts.Of("Watermark", res.Watermark, 3), counts.Of("MarkersTaken", res.MarkersTaken, 1))
	wantReal(t, rows(t, db), seq, "the committed event")
}

// FILL_BATCH_LIMIT=2 with 5 burned sequences: all 5 filled in one pass,
// grace paid once.
func TestBatchLimitAllFilledInOnePassGraceOnce(t *testing.T) {
	t.Parallel()
	db := startedDB(t)
	first, last := db.Burn(t, 5)
	top := commit(t, db, 1)

	clk := &clock{}
	cfg := testConfig()
	cfg.BatchLimit, cfg.Grace, cfg.PassBudget = 2, 10*time.Second, time.Second
	rec := &recorder{Q: db.Pool}
	s := newService(t, rec, cfg, Options{Options: pass.Options{Now: clk.Now}})
	wantWaiting(t, runPass(t, s), WaitingGrace)
	clk.Advance(cfg.Grace)
	rec.reset()
	res := runPass(t, s)
	wantCaughtUp(t, res) // no second grace
	if res.Filled != 5 {
		t.Errorf("Filled = %d, want all 5 in this pass", res.Filled)
	}
	if res.Watermark != top {
		t.Errorf("Watermark = %d, want %d", res.Watermark, top)
	}
	if res.FilledMin == nil || *res.FilledMin != first {
		t.Errorf("FilledMin = %s, want %d", show(res.FilledMin), first)
	}
	if res.FilledMax == nil || *res.FilledMax != last {
		t.Errorf("FilledMax = %s, want %d", show(res.FilledMax), last)
	}
	if inserts := rec.inserts(); inserts != 3 {
		t.Errorf("inserts = %d, want 3 of at most 2", inserts)
	}
}

// A stall above the marker head (allocated after the marker was taken)
// starts the next cycle, with a fresh marker.
func TestStallAboveMarkerHeadStartsNextCycle(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db, w, _ := stallBehindOpenWriter(t)

	cfg := testConfig()
	cfg.Grace, cfg.PassBudget = pass.Off, time.Second
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	wantWaiting(t, res, WaitingProof)
	if res.Cycle == nil || res.Cycle.MarkerHead == nil || *res.Cycle.MarkerHead != 3 {
		t.Errorf("Cycle = %+v, want a cycle with marker head 3", res.Cycle)
	}
	w.commit()
	gap, _ := db.Burn(t, 1) // 4, allocated after the marker: above its head 3
	commit(t, db, 1)        // 5

	res = runPass(t, s)
	wantCaughtUp(t, res)
	if res.Filled != 1 {
		t.Errorf("next cycle: Filled = %d, want 1 (sequence %d)", res.Filled, gap)
	}
	counts.Want(t, "next cycle", counts.Of("Watermark", res.Watermark, 5), counts.Of("MarkersTaken", res.MarkersTaken, 1, "a fresh marker"))
	wantPlaceholders(t, rows(t, db), gap)
}

// A burned tail (head above the highest present row) is filled, and no
// placeholder goes above the head.
func TestBurnedTailFilled(t *testing.T) {
	t.Parallel()
	db := startedDB(t)
	first, last := db.Burn(t, 3)

	cfg := testConfig()
	cfg.Grace = pass.Off
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	wantCaughtUp(t, res)
	if res.Filled != 3 {
		t.Errorf("Filled = %d, want the tail %d..%d", res.Filled, first, last)
	}
	if res.Watermark != last {
		t.Errorf("Watermark = %d, want %d", res.Watermark, last)
	}
	if res.Head != last {
		t.Errorf("Head = %d, want %d", res.Head, last)
	}
	got := rows(t, db)
	wantPlaceholders(t, got, testdb.Span(first, last)...)
	if len(got) != int(last) {
		t.Errorf("rows above the head %d: %v", last, got)
	}
	// The next writer's sequence was never taken by a placeholder.
	if next := commit(t, db, 1); next != last+1 {
		t.Errorf("next publish got %d, want %d", next, last+1)
	}
}

// The filled range is notified on <schema>_events by each insert, and a
// pass that writes nothing notifies nothing.
func TestFilledRangeNotifiedPerInsert(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	channel := pgx.Identifier{db.Schema.EventsChannel()}.Sanitize()
	listener := db.Connect(t)
	testdb.Exec(t, listener, `LISTEN `+channel)
	started(t, db)
	first, last := db.Burn(t, 5)
	commit(t, db, 1)

	cfg := testConfig()
	cfg.Grace, cfg.BatchLimit = pass.Off, 2
	s := newService(t, db.Pool, cfg, Options{})
	if res := runPass(t, s); res.Filled != 5 {
		t.Fatalf("Filled = %d, want %d..%d; %v", res.Filled, first, last, res)
	}
	next := func() string {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		n, err := listener.WaitForNotification(wctx)
		if err != nil {
			t.Fatal(err)
		}
		return n.Payload
	}
	for lo := first; lo <= last; lo += 2 {
		want := fmt.Sprintf(`{"min":%d,"max":%d}`, lo, min(lo+1, last))
		if got := next(); got != want {
			t.Fatalf("notification %q, want %q", got, want)
		}
	}

	// Nothing left to write: the next notification is the sentinel sent
	// after the pass (one channel delivers in commit order).
	if res := runPass(t, s); res.Filled != 0 {
		t.Fatalf("second pass: Filled = %d, want 0; %v", res.Filled, res)
	}
	testdb.Exec(t, db.Pool, `NOTIFY `+channel+`, 'sentinel'`)
	if got := next(); got != "sentinel" {
		t.Fatalf("a pass that wrote nothing notified %q", got)
	}
}

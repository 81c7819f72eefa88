package fill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/metrics"
	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// The fill's soundness rules and pass behaviour, each against a fresh real
// database.
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
	db := testdb.New(t)
	gap := stallBehindRollback(t, db)

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
	if res.StalledAt == nil || *res.StalledAt != gap {
		t.Errorf("inside the grace: StalledAt = %s, want %d", show(res.StalledAt), gap)
	}
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
	if res.Filled != 1 {
		t.Errorf("after the grace: Filled = %d, want 1", res.Filled)
	}
	if res.Watermark != 3 {
		t.Errorf("after the grace: Watermark = %d, want 3", res.Watermark)
	}
	if res.StalledAt != nil {
		t.Errorf("after the grace: StalledAt = %d, want null", *res.StalledAt)
	}
	if res.Cycle != nil {
		t.Errorf("after the grace: Cycle = %+v, want null", res.Cycle)
	}
	if r, ok := rows(t, db)[gap]; !isPlaceholder(r, ok) {
		t.Errorf("sequence %d: %+v, want a fill placeholder", gap, r)
	}
}

// A grace that fits in the budget is waited out inside one pass.
func TestGraceWaitedOutInsideThePass(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	gap := stallBehindRollback(t, db)

	cfg := testConfig()
	cfg.Grace = 400 * time.Millisecond
	begin := time.Now()
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	took := time.Since(begin)
	wantCaughtUp(t, res)
	if res.Filled != 1 {
		t.Errorf("Filled = %d, want the gap filled by the same pass", res.Filled)
	}
	if res.Watermark != 3 {
		t.Errorf("Watermark = %d, want 3", res.Watermark)
	}
	if took < cfg.Grace {
		t.Errorf("filled after %s, before the %s grace", took, cfg.Grace)
	}
	if r, ok := rows(t, db)[gap]; !isPlaceholder(r, ok) {
		t.Errorf("sequence %d: %+v, want a fill placeholder", gap, r)
	}
}

// A stall that resolves inside the grace (late commit) keeps the real
// event and writes no placeholder.
func TestLateCommitInsideGraceWritesNothing(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db := testdb.New(t)
	w, late := stallBehindOpenWriter(t, db)

	cfg := testConfig()
	cfg.Grace = 2 * time.Second
	await := startPassUntil(t, db, newService(t, db.Pool, cfg, Options{}), sawStall)
	w.commit()
	res := await()
	wantCaughtUp(t, res)
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0", res.Filled)
	}
	if res.Watermark != 3 {
		t.Errorf("Watermark = %d, want 3", res.Watermark)
	}
	if res.MarkersTaken != 0 {
		t.Errorf("MarkersTaken = %d, want 0: the stall resolved inside its grace", res.MarkersTaken)
	}
	if r, ok := rows(t, db)[late]; !isReal(r, ok) {
		t.Errorf("sequence %d: %+v, want the real event", late, r)
	}
}

// A writer still open when the grace ends: no fill while it runs and
// blocked_by names it; after it rolls back the gap is filled.
func TestOpenWriterBlocksThenRollsBack(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db := testdb.New(t)
	w, gap := stallBehindOpenWriter(t, db)

	cfg := testConfig()
	cfg.PassBudget = time.Second
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	wantWaiting(t, res, WaitingProof)
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0 while the writer runs", res.Filled)
	}
	if res.StalledAt == nil || *res.StalledAt != gap {
		t.Errorf("StalledAt = %s, want %d", show(res.StalledAt), gap)
	}
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
	if res.Filled != 1 {
		t.Errorf("after rollback: Filled = %d, want 1", res.Filled)
	}
	if res.MarkersTaken != 0 {
		t.Errorf("after rollback: MarkersTaken = %d, want 0: the gap filled on the kept marker", res.MarkersTaken)
	}
	if res.ProofBlockedSeconds != 0 {
		t.Errorf("after rollback: ProofBlockedSeconds = %v, want 0", res.ProofBlockedSeconds)
	}
	if r, ok := rows(t, db)[gap]; !isPlaceholder(r, ok) {
		t.Errorf("sequence %d: %+v, want a fill placeholder", gap, r)
	}
}

// The twin: the writer commits while the pass polls the proof; the
// proof then passes, the insert meets the committed row, and DO NOTHING
// keeps the real event.
func TestOpenWriterCommitsDuringProof(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db := testdb.New(t)
	w, seq := stallBehindOpenWriter(t, db)

	cfg := testConfig()
	cfg.Grace = pass.Off
	cfg.PassBudget = 5 * time.Second
	await := startPassUntil(t, db, newService(t, db.Pool, cfg, Options{}), pollsProof)
	w.commit()
	res := await()
	wantCaughtUp(t, res)
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0", res.Filled)
	}
	if res.Watermark != 3 {
		t.Errorf("Watermark = %d, want 3", res.Watermark)
	}
	if res.MarkersTaken != 1 {
		t.Errorf("MarkersTaken = %d, want 1", res.MarkersTaken)
	}
	if r, ok := rows(t, db)[seq]; !isReal(r, ok) {
		t.Errorf("sequence %d: %+v, want the committed event", seq, r)
	}
}

// FILL_BATCH_LIMIT=2 with 5 burned sequences: all 5 filled in one pass,
// grace paid once.
func TestBatchLimitAllFilledInOnePassGraceOnce(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	started(t, db)
	first, last := burn(t, db, 5)
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
	db := testdb.New(t)
	w, _ := stallBehindOpenWriter(t, db)

	cfg := testConfig()
	cfg.Grace, cfg.PassBudget = pass.Off, time.Second
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	wantWaiting(t, res, WaitingProof)
	if res.Cycle == nil || res.Cycle.MarkerHead == nil || *res.Cycle.MarkerHead != 3 {
		t.Errorf("Cycle = %+v, want a cycle with marker head 3", res.Cycle)
	}
	w.commit()
	gap, _ := burn(t, db, 1) // 4, allocated after the marker: above its head 3
	commit(t, db, 1)         // 5

	res = runPass(t, s)
	wantCaughtUp(t, res)
	if res.Filled != 1 {
		t.Errorf("next cycle: Filled = %d, want 1 (sequence %d)", res.Filled, gap)
	}
	if res.Watermark != 5 {
		t.Errorf("next cycle: Watermark = %d, want 5", res.Watermark)
	}
	if res.MarkersTaken != 1 {
		t.Errorf("next cycle: MarkersTaken = %d, want a fresh marker", res.MarkersTaken)
	}
	if r, ok := rows(t, db)[gap]; !isPlaceholder(r, ok) {
		t.Errorf("sequence %d: %+v, want a fill placeholder", gap, r)
	}
}

// A burned tail (head above the highest present row) is filled, and no
// placeholder goes above the head.
func TestBurnedTailFilled(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	started(t, db)
	first, last := burn(t, db, 3)

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
	for s := first; s <= last; s++ {
		if r, ok := got[s]; !isPlaceholder(r, ok) {
			t.Errorf("sequence %d: %+v, want a fill placeholder", s, r)
		}
	}
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
	exec(t, listener, `LISTEN `+channel)
	started(t, db)
	first, last := burn(t, db, 5)
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
	exec(t, db.Pool, `NOTIFY `+channel+`, 'sentinel'`)
	if got := next(); got != "sentinel" {
		t.Fatalf("a pass that wrote nothing notified %q", got)
	}
}

// Gaps present at the first run are filled without waiting for the grace.
func TestHistoricalGapsNeedNoGrace(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	commit(t, db, 2) // 1, 2
	burn(t, db, 3)   // 3..5
	commit(t, db, 1) // 6
	burn(t, db, 2)   // 7, 8: a historical burned tail
	cfg := testConfig()
	cfg.Grace = time.Hour
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	wantCaughtUp(t, res)
	if res.Filled != 5 {
		t.Errorf("Filled = %d, want 3..5 and 7..8 at once", res.Filled)
	}
	if res.Watermark != 8 {
		t.Errorf("Watermark = %d, want 8", res.Watermark)
	}
	if res.MarkersTaken != 1 {
		t.Errorf("MarkersTaken = %d, want one marker for all historical gaps", res.MarkersTaken)
	}
	got := rows(t, db)
	for _, s := range []int64{3, 4, 5, 7, 8} {
		if r, ok := got[s]; !isPlaceholder(r, ok) {
			t.Errorf("sequence %d: %+v, want a fill placeholder", s, r)
		}
	}
}

// A young outbox whose very first writers rolled back: the consumer starts
// at 0 and must not wait on sequence 1 forever.
func TestYoungOutboxFillsFromTheStart(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	burn(t, db, 2)   // 1, 2
	commit(t, db, 1) // 3
	cfg := testConfig()
	cfg.Grace = time.Hour
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	if res.Filled != 2 {
		t.Errorf("Filled = %d, want 1..2 filled as historical gaps", res.Filled)
	}
	if res.Watermark != 3 {
		t.Errorf("Watermark = %d, want 3", res.Watermark)
	}
}

// Rule §3.2 on the historical path: historical gaps are proven with one
// marker, assigned after the first run's head read, so only sequences at
// or below that head may be filled with it. A writer that allocates later
// (its xid newer than the marker) stays unfilled while it runs, even when
// a later pass reads a higher head and the historical proof passes.
func TestRuleHistoricalFillCappedAtFirstHead(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db := testdb.New(t)
	ctx := context.Background()
	commit(t, db, 1)                // 1
	historical, _ := burn(t, db, 1) // 2: a gap present at the first run
	commit(t, db, 1)                // 3: the first run's head
	old := openWriter(t, db)        // an older transaction holds the proof back
	if _, err := old.tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig()
	cfg.Grace, cfg.PassBudget = time.Hour, time.Second
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	wantWaiting(t, res, WaitingProof)
	if !res.Historical {
		t.Errorf("first run: Historical = false, want the historical proof; %v", res)
	}
	if res.MarkersTaken != 1 {
		t.Errorf("first run: MarkersTaken = %d, want 1", res.MarkersTaken)
	}
	if res.Head != 3 {
		t.Errorf("first run: Head = %d, want 3", res.Head)
	}

	late := openWriter(t, db) // xid newer than the historical marker
	seq := late.allocate()    // 4, above the first run's head, row not yet inserted
	commit(t, db, 1)          // 5: the head a later pass reads
	old.rollback()

	res = runPass(t, s)
	if res.Filled != 1 {
		t.Errorf("Filled = %d, want only the historical gap %d", res.Filled, historical)
	}
	if res.Watermark != historical+1 {
		t.Errorf("Watermark = %d, want %d", res.Watermark, historical+1)
	}
	if res.Head != 5 {
		t.Errorf("Head = %d, want 5", res.Head)
	}
	wantWaiting(t, res, WaitingGrace) // the live stall at seq, in its grace
	got := rows(t, db)
	if r, ok := got[historical]; !isPlaceholder(r, ok) {
		t.Errorf("historical gap %d: %+v, want a fill placeholder", historical, r)
	}
	if r, ok := got[seq]; ok {
		t.Errorf("sequence %d of a writer still open was filled: %+v", seq, r)
	}
	late.rollback()
}

// History pruned below the lowest present row (more than a page of it) is
// not refilled.
func TestPrunedHistoryIsNotRefilled(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	commit(t, db, 6) // 1..6
	exec(t, db.Pool, `DELETE FROM outbox.events WHERE sequence <= 3`)
	cfg := testConfig()
	cfg.PageSize = 2
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0", res.Filled)
	}
	if res.Watermark != 6 {
		t.Errorf("Watermark = %d, want 6", res.Watermark)
	}
	if got := rows(t, db); len(got) != 3 {
		t.Errorf("rows = %v, want only 4..6", got)
	}
}

// Committed rows are untouched by fills (payload and xmin compared).
func TestCommittedRowsUntouched(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for i := 0; i < 5; i++ {
		commit(t, db, 2)
		burn(t, db, 2)
	}
	commit(t, db, 1)
	before := rows(t, db)

	res := runPass(t, newService(t, db.Pool, testConfig(), Options{}))
	wantCaughtUp(t, res)
	if res.Filled != 10 {
		t.Errorf("Filled = %d, want 10", res.Filled)
	}
	if res.Watermark != 21 {
		t.Errorf("Watermark = %d, want 21", res.Watermark)
	}
	after := rows(t, db)
	for s, b := range before {
		a, ok := after[s]
		if !ok {
			t.Errorf("committed row %d is gone", s)
			continue
		}
		if *a.Payload != *b.Payload {
			t.Errorf("committed row %d: payload %s, was %s", s, *a.Payload, *b.Payload)
		}
		if a.Xmin != b.Xmin {
			t.Errorf("committed row %d: xmin %s, was %s (rewritten)", s, a.Xmin, b.Xmin)
		}
		if a.FilledBy != nil {
			t.Errorf("committed row %d: filled_by %s, want null", s, *a.FilledBy)
		}
	}
	if len(after) != 21 {
		t.Errorf("%d rows, want 21", len(after))
	}
}

// Two concurrent invocations: one works, the other returns lease; every
// gap filled exactly once.
func TestConcurrentPassesLease(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	started(t, db)
	burn(t, db, 3)
	commit(t, db, 1)
	burn(t, db, 2)
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
	db := testdb.New(t)
	started(t, db)
	exec(t, db.Pool, `UPDATE outbox.leases SET owner = 'crashed', expires_at = now() + interval '1 hour' WHERE name = 'fill'`)
	s := newService(t, db.Pool, testConfig(), Options{})
	res := runPass(t, s)
	wantWaiting(t, res, WaitingLease)
	if res.Watermark != 1 {
		t.Errorf("live lease: Watermark = %d, want 1 (reported while waiting on the lease)", res.Watermark)
	}
	exec(t, db.Pool, `UPDATE outbox.leases SET expires_at = now() - interval '1 second' WHERE name = 'fill'`)
	wantCaughtUp(t, runPass(t, s)) // the expired lease is taken
}

// The context cancelled mid-pass: the next pass finishes correctly,
// and the grace still counts from the first pass that saw the stall.
func TestCancelledMidPassNextContinues(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	gap := stallBehindRollback(t, db)

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
	if res.Filled != 1 {
		t.Errorf("next pass: Filled = %d, want 1", res.Filled)
	}
	if res.Watermark != 3 {
		t.Errorf("next pass: Watermark = %d, want 3", res.Watermark)
	}
	if r, ok := rows(t, db)[gap]; !isPlaceholder(r, ok) {
		t.Errorf("sequence %d: %+v, want a fill placeholder", gap, r)
	}
	// The next pass waited only the rest of the grace, from the persisted first sighting.
	var recorded time.Time
	if err := db.Pool.QueryRow(context.Background(), `SELECT recorded_at FROM outbox.events WHERE sequence = $1`, gap).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if recorded.Before(firstSeen.Add(cfg.Grace)) {
		t.Errorf("filled at %s, before first sighting %s + grace", recorded, firstSeen)
	}
}

// A healthy table of 1,000,000 rows with 1,000 new ones: a small,
// bounded number of statements.
func TestLargeHealthyTableFewStatements(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	if testing.Short() {
		testenv.Skip(t, "loads 1,000,000 rows")
	}
	db := testdb.New(t)
	const n = 1_000_000
	exec(t, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
		SELECT g, 't', '{}' FROM generate_series(1, $1::bigint) g`, n)
	exec(t, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, n)

	// The caught-up state a running deployment is in: one pass first (with
	// a wide page so the test stays quick).
	catchUp := testConfig()
	catchUp.PageSize = 100_000
	if res := runPass(t, newService(t, db.Pool, catchUp, Options{})); res.Watermark != n {
		t.Fatalf("catch-up pass: Watermark = %d, want %d; %v", res.Watermark, n, res)
	}
	last := commit(t, db, 1000)

	res := runPass(t, newService(t, db.Pool, testConfig(), Options{}))
	wantCaughtUp(t, res)
	if res.Watermark != last {
		t.Errorf("Watermark = %d, want %d", res.Watermark, last)
	}
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0", res.Filled)
	}
	// lease+state, head, one page of 1,000, save+release.
	if res.Statements > 6 {
		t.Errorf("a healthy pass over %d rows took %d statements, want <= 6", n, res.Statements)
	}
	t.Logf("healthy pass over %d rows + 1000 new: %d statements, %d ms", n, res.Statements, res.DurationMS)
}

// §3.2 marker after head: a writer that takes its xid and allocates a
// sequence between the head read and the marker assignment holds a
// sequence above the head, and its xid is older than the marker: the pass
// must not fill it (and cannot prove anything until it ends). Reading the
// head after the marker would let the proof pass and fill it under the
// open writer, whose insert would then fail.
func TestRuleMarkerAfterHead(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db := testdb.New(t)
	gap := stallBehindRollback(t, db)

	cfg := testConfig()
	cfg.Grace, cfg.PassBudget = pass.Off, time.Second
	s := newService(t, db.Pool, cfg, Options{})
	var w *writer
	var late int64
	s.afterHeadRead = func(head int64) {
		if w == nil {
			w = openWriter(t, db)
			late = w.allocate()
		}
	}
	res := runPass(t, s)
	if w == nil {
		t.Fatal("the pass never took a marker")
	}
	if _, ok := rows(t, db)[late]; ok {
		t.Fatalf("sequence %d, allocated by an open writer between head read and marker, was filled", late)
	}
	wantWaiting(t, res, WaitingProof) // blocked by the writer
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0 while the writer runs", res.Filled)
	}
	if err := w.insert(late); err != nil {
		t.Fatalf("the writer's own insert of %d failed: %v", late, err)
	}
	w.commit()
	res = runPass(t, s)
	wantCaughtUp(t, res)
	if res.Filled != 1 {
		t.Errorf("after the writer: Filled = %d, want 1", res.Filled)
	}
	if res.Watermark != late {
		t.Errorf("after the writer: Watermark = %d, want %d", res.Watermark, late)
	}
	got := rows(t, db)
	if r, ok := got[gap]; !isPlaceholder(r, ok) {
		t.Errorf("sequence %d: %+v, want a fill placeholder", gap, r)
	}
	if r, ok := got[late]; !isReal(r, ok) {
		t.Errorf("sequence %d: %+v, want the writer's event", late, r)
	}
}

// §3.2 structurally: the statement that assigns the marker
// (pg_current_xact_id) comes strictly after, and apart from, the head read.
func TestRuleMarkerStatementAfterHeadStatement(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	stallBehindRollback(t, db)
	rec := &recorder{Q: db.Pool}
	cfg := testConfig()
	cfg.Grace = pass.Off
	if res := runPass(t, newService(t, rec, cfg, Options{})); res.Filled != 1 {
		t.Fatalf("Filled = %d, want 1; %v", res.Filled, res)
	}
	stmts := rec.statements()
	marker := slices.IndexFunc(stmts, assignsMarker)
	if marker < 1 {
		t.Fatalf("no marker statement after a first statement in %q", stmts)
	}
	if strings.Contains(stmts[marker], "allocation_head") {
		t.Errorf("the marker statement also reads the head: %s", stmts[marker])
	}
	// The head the marker pairs with is the statement just before it...
	if !strings.Contains(stmts[marker-1], "allocation_head") {
		t.Errorf("the statement before the marker is not a head read: %s", stmts[marker-1])
	}
	// ...and no head is read after it before the proof uses it.
	for _, q := range stmts[marker+1:] {
		if strings.Contains(q, "pg_snapshot_xmin") {
			break
		}
		if strings.Contains(q, "allocation_head") {
			t.Errorf("a head read after the marker: %s", q)
		}
	}
}

// §3.3 proof: an allocated sequence whose writer is still open is
// never filled, however long the pass waits.
func TestRuleProofOpenWriterNeverFilled(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db := testdb.New(t)
	w, held := stallBehindAllocatingWriter(t, db)

	cfg := testConfig()
	cfg.Grace, cfg.PassBudget = pass.Off, 1500*time.Millisecond
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0 while the writer runs", res.Filled)
	}
	wantWaiting(t, res, WaitingProof)
	if _, ok := rows(t, db)[held]; ok {
		t.Errorf("sequence %d filled under an open writer", held)
	}
	if err := w.insert(held); err != nil {
		t.Fatalf("the writer's insert failed: %v", err)
	}
	w.commit()
}

// §3.5 never overwrite, never above the head: a committed row inside
// the window keeps its payload and xmin, and no placeholder is written
// above the allocation head even when the window (W + page) reaches past
// it.
func TestRuleNeverOverwriteNeverAboveHead(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	stallBehindRollback(t, db) // 1, gap 2, 3
	burn(t, db, 2)             // 4, 5: the tail
	before := rows(t, db)

	cfg := testConfig()
	cfg.Grace = pass.Off
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	if res.Filled != 3 {
		t.Errorf("Filled = %d, want 3", res.Filled)
	}
	if res.Watermark != 5 {
		t.Errorf("Watermark = %d, want 5", res.Watermark)
	}
	a, b := rows(t, db)[3], before[3]
	if *a.Payload != *b.Payload {
		t.Errorf("row 3: payload %s, was %s", *a.Payload, *b.Payload)
	}
	if a.Xmin != b.Xmin {
		t.Errorf("row 3: xmin %s, was %s (rewritten)", a.Xmin, b.Xmin)
	}
	var maxSeq int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT max(sequence) FROM outbox.events`).Scan(&maxSeq); err != nil {
		t.Fatal(err)
	}
	if h := head(t, db); maxSeq != h {
		t.Errorf("a row above the head %d: max %d", h, maxSeq)
	}
}

// §3.5 never overwrite, for a row that appears after the pass listed its
// sequence as missing (a concurrent compensate, or a writer that broke
// rule 1): the fill's insert keeps it as it is and counts only what it
// wrote itself.
func TestRuleNeverOverwriteARowWrittenAfterThePageRead(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	started(t, db)
	first, last := burn(t, db, 3) // 2..4
	commit(t, db, 1)

	cfg := testConfig()
	cfg.Grace = pass.Off
	s := newService(t, db.Pool, cfg, Options{})
	var theirs string // the concurrent row's xmin
	s.beforeInsert = func(seqs []int64) {
		if theirs != "" {
			return
		}
		if err := db.Pool.QueryRow(context.Background(),
			`INSERT INTO outbox.events (sequence, filled_by) VALUES ($1, 'compensate') RETURNING xmin::text`, seqs[0]).Scan(&theirs); err != nil {
			t.Error(err)
		}
	}
	res := runPass(t, s)
	if res.Filled != last-first {
		t.Errorf("Filled = %d, want %d (not the one compensate wrote)", res.Filled, last-first)
	}
	r := rows(t, db)[first]
	if r.FilledBy == nil || *r.FilledBy != "compensate" {
		t.Errorf("sequence %d: filled_by %s, want compensate's placeholder kept", first, show(r.FilledBy))
	}
	if r.Xmin != theirs {
		t.Errorf("sequence %d: xmin %s, want %s: the fill wrote over the concurrent row", first, r.Xmin, theirs)
	}
}

// The empty table whose head lies more than a page above the start: its
// writers rolled back (or their rows were deleted). The first pass anchors
// at 0 and proves them; proven, they are passed over without a
// placeholder, and the first row to come is read from where they end.
func TestEmptyTableProvenPrefixIsPassedOver(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	burn(t, db, 3)
	cfg := testConfig()
	cfg.PageSize = 2
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	if !res.Started {
		t.Errorf("first pass: Started = false, want true; %v", res)
	}
	if res.Filled != 0 {
		t.Errorf("first pass: Filled = %d, want 0 (1..3 passed over, not written)", res.Filled)
	}
	if res.PassedOver != 3 {
		t.Errorf("first pass: PassedOver = %d, want 3", res.PassedOver)
	}
	if res.MarkersTaken != 1 {
		t.Errorf("first pass: MarkersTaken = %d, want the one proof that allows it", res.MarkersTaken)
	}
	wantCaughtUp(t, res)
	if res.Head != 3 {
		t.Errorf("first pass: Head = %d, want 3", res.Head)
	}
	if res.Watermark != 3 {
		t.Errorf("first pass: Watermark = %d, want 3", res.Watermark)
	}
	commit(t, db, 1) // 4
	res = runPass(t, s)
	if res.Filled != 0 {
		t.Errorf("next pass: Filled = %d, want 0", res.Filled)
	}
	if res.Watermark != 4 {
		t.Errorf("next pass: Watermark = %d, want 4", res.Watermark)
	}
	if got := rows(t, db); len(got) != 1 {
		t.Errorf("rows = %v, want only 4", got)
	}
}

var _ store.Querier = (*recorder)(nil)

// A prepared (two-phase) transaction holds the horizon with no backend, so
// pg_stat_activity never shows it: blocked_by must still name it, and the
// gap it may own must not be filled until it is resolved.
func TestBlockedByNamesPreparedTransaction(t *testing.T) {
	// Not parallel: holds the cluster-wide xid horizon (see the file comment).
	db := testdb.New(t)
	ctx := context.Background()
	var maxPrepared string
	if err := db.Pool.QueryRow(ctx, `SHOW max_prepared_transactions`).Scan(&maxPrepared); err != nil {
		t.Fatal(err)
	}
	if maxPrepared == "0" {
		// The stack's cluster allows prepared transactions; a developer
		// pointing DATABASE_URL at another server opts out explicitly, as
		// for a missing stack. CI never sets the variable.
		if os.Getenv(testenv.SkipVar) == "1" {
			testenv.Skip(t, "needs max_prepared_transactions > 0 (infra/stack/up.sh sets it)")
		}
		t.Fatalf("max_prepared_transactions is 0: use the cluster infra/stack/up.sh makes, or set %s=1 to skip", testenv.SkipVar)
	}
	commit(t, db, 1) // 1
	gid := "okt-" + db.Name
	w := db.Connect(t)
	if _, err := w.Exec(ctx, `BEGIN; SELECT outbox.publish('t', '{}'); PREPARE TRANSACTION '`+gid+`'`); err != nil {
		t.Fatal(err)
	}
	resolved := false
	t.Cleanup(func() {
		if !resolved {
			_, _ = db.Pool.Exec(context.Background(), `ROLLBACK PREPARED '`+gid+`'`)
		}
	})
	commit(t, db, 1) // 3: 2 belongs to the prepared writer

	cfg := testConfig()
	cfg.PassBudget = time.Second
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	if res.Filled != 0 {
		t.Errorf("Filled = %d, want 0 while the prepared transaction is unresolved", res.Filled)
	}
	wantWaiting(t, res, WaitingProof)
	named := slices.ContainsFunc(res.BlockedBy, func(b Blocker) bool { return b.PID == 0 && strings.Contains(b.State, gid) })
	if !named {
		t.Errorf("blocked_by %+v does not name prepared transaction %s", res.BlockedBy, gid)
	}

	exec(t, db.Pool, `ROLLBACK PREPARED '`+gid+`'`)
	resolved = true
	res = runPass(t, s)
	if res.Filled != 1 {
		t.Errorf("after ROLLBACK PREPARED: Filled = %d, want 1", res.Filled)
	}
	if res.Watermark != 3 {
		t.Errorf("after ROLLBACK PREPARED: Watermark = %d, want 3", res.Watermark)
	}
}

package fill

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
)

// The first run: the first pass anchors the watermark at 0, only a proof
// moves it over what is missing below the lowest present row, and gaps
// already there need no grace. A test here that holds an xid across a
// pass does not run in parallel (see fill_test.go).

// consume reads everything a consumer named name may take from its
// position, commits the position, and returns what it read.
func consume(t *testing.T, db *testdb.DB, name string) []int64 {
	t.Helper()
	ctx := context.Background()
	var pos int64
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce((SELECT position FROM outbox.consumers WHERE name = $1), 0)`, name).Scan(&pos); err != nil {
		t.Fatal(err)
	}
	var read []int64
	for {
		page := db.ReadEvents(t, pos, 500)
		if len(page) == 0 {
			break
		}
		read = append(read, page...)
		pos = page[len(page)-1]
	}
	if _, err := db.Pool.Exec(ctx, `SELECT outbox.commit_position($1, $2)`, name, pos); err != nil {
		t.Fatal(err)
	}
	return read
}

// openBatch plays writer A of the reproduction: publish_batch of n events
// inside a transaction it keeps open; it returns the sequences it holds.
func openBatch(t *testing.T, db *testdb.DB, n int) (*writer, []int64) {
	t.Helper()
	w := openWriter(t, db)
	rs, err := w.tx.Query(context.Background(),
		`SELECT s FROM outbox.publish_batch('t', array_fill('{"a":true}'::jsonb, ARRAY[$1::int])) AS s`, n)
	if err != nil {
		t.Fatal(err)
	}
	held, err := pgx.CollectRows(rs, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return w, held
}

// The reproduction: writer A holds 1..n open, B commits n+1 above it. The
// first pass must not anchor above A's events, a consumer must not pass
// them, prune must not delete them; once A commits a consumer gets them
// all.
func TestFirstWatermarkWaitsForTheProofOfAnOpenPrefix(t *testing.T) {
	cases := []struct {
		name string
		page int
		n    int // A's events; one more than a page in both
	}{
		{"default page", DefaultPageSize, DefaultPageSize + 1},
		{"FILL_PAGE_SIZE=1", 1, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := testdb.New(t)
			ctx := context.Background()
			a, held := openBatch(t, db, c.n)
			if want := testdb.Span(1, int64(c.n)); !slices.Equal(held, want) {
				t.Fatalf("writer A holds %v, want %v", held, want)
			}
			b := commit(t, db, 1) // n+1, committed above A's

			cfg := testConfig()
			cfg.PageSize, cfg.PassBudget = c.page, time.Second
			s := newService(t, db.Pool, cfg, Options{})
			res := runPass(t, s)
			if res.Watermark != 0 {
				t.Errorf("first pass: Watermark = %d, want 0 while A's %d..%d may commit", res.Watermark, held[0], held[len(held)-1])
			}
			wantWaiting(t, res, WaitingProof)
			if !slices.ContainsFunc(res.BlockedBy, func(bl Blocker) bool { return bl.PID == a.pid }) {
				t.Errorf("first pass: blocked_by = %+v, want writer A (pid %d)", res.BlockedBy, a.pid)
			}
			if res.Filled != 0 {
				t.Errorf("first pass: Filled = %d, want 0", res.Filled)
			}
			if got := db.ReadEvents(t, 0, 100); len(got) != 0 {
				t.Errorf("read_events(0, 100) = %v, want nothing before A's events are decided", got)
			}
			if got := consume(t, db, "c"); len(got) != 0 {
				t.Errorf("the consumer read %v, want nothing yet", got)
			}

			// Everything is older than PRUNE_EVENTS_AFTER=1s now: prune
			// must still delete nothing nobody read.
			time.Sleep(1100 * time.Millisecond)
			pr, err := prune.New(db.Pool, prune.Config{Schema: testdb.Schema, EventsAfter: time.Second}, prune.Options{})
			if err != nil {
				t.Fatal(err)
			}
			pres, err := pr.RunOnce(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if pres.DeletedEvents != 0 {
				t.Errorf("prune deleted %d events before any was read, want 0", pres.DeletedEvents)
			}

			a.commit()
			res = runPass(t, s)
			wantCaughtUp(t, res)
			if res.Watermark != b {
				t.Errorf("after A commits: Watermark = %d, want %d", res.Watermark, b)
			}
			if res.Filled != 0 || res.PassedOver != 0 {
				t.Errorf("after A commits: Filled = %d, PassedOver = %d, want 0 and 0", res.Filled, res.PassedOver)
			}
			if got, want := consume(t, db, "c"), testdb.Span(1, b); !slices.Equal(got, want) {
				t.Errorf("the consumer read %d events (%v...), want all %d", len(got), got[:min(len(got), 5)], len(want))
			}
			pres, err = pr.RunOnce(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if pres.DeletedEvents != b {
				t.Errorf("prune after the consumer read everything deleted %d, want %d", pres.DeletedEvents, b)
			}
		})
	}
}

// A prefix that really was deleted (three million sequences allocated and
// gone, as after an earlier retention job; a sequence started high looks
// the same): the first pass anchors at 0 and waits for the proof, since a
// writer may still hold the lowest sequences; once proven, the watermark
// goes just below the lowest present row, written by that writer, without
// a placeholder.
func TestDeletedPrefixIsPassedOverOnlyOnceProven(t *testing.T) {
	db := testdb.New(t)
	const deleted = 3_000_000
	testdb.Exec(t, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, deleted)
	w := openWriter(t, db)
	late := w.publish() // deleted+1, not yet committed
	top := commit(t, db, 9)

	cfg := testConfig()
	cfg.PassBudget = time.Second
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	if res.Watermark != 0 {
		t.Errorf("first pass: Watermark = %d, want 0 while the writer of %d runs", res.Watermark, late)
	}
	wantWaiting(t, res, WaitingProof)
	if got := db.ReadEvents(t, 0, 100); len(got) != 0 {
		t.Errorf("read_events(0, 100) = %v, want nothing before the proof", got)
	}

	w.commit()
	res = runPass(t, s)
	wantCaughtUp(t, res)
	if res.Watermark != top {
		t.Errorf("after the proof: Watermark = %d, want %d", res.Watermark, top)
	}
	if res.PassedOver != deleted {
		t.Errorf("after the proof: PassedOver = %d, want the %d deleted sequences", res.PassedOver, deleted)
	}
	if res.Filled != 0 {
		t.Errorf("after the proof: Filled = %d, want no placeholder for the deleted prefix", res.Filled)
	}
	if res.Statements > 20 {
		t.Errorf("after the proof: %d statements, want a handful for a prefix passed over", res.Statements)
	}
	if got := rows(t, db); len(got) != 10 {
		t.Errorf("%d rows, want the 10 events and nothing written", len(got))
	}
	if got, want := db.ReadEvents(t, 0, 100), testdb.Span(late, top); !slices.Equal(got, want) {
		t.Errorf("read_events(0, 100) = %v, want %v: the late writer's event first", got, want)
	}
}

// Gaps present at the first run are filled without waiting for the grace.
func TestHistoricalGapsNeedNoGrace(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	commit(t, db, 2) // 1, 2
	db.Burn(t, 3)    // 3..5
	commit(t, db, 1) // 6
	db.Burn(t, 2)    // 7, 8: a historical burned tail
	cfg := testConfig()
	cfg.Grace = time.Hour
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	wantCaughtUp(t, res)
	if res.Filled != 5 {
		t.Errorf("Filled = %d, want 3..5 and 7..8 at once", res.Filled)
	}
	counts.Want(t, "",
		counts.Of("Watermark", res.Watermark, 8),
		counts.Of("MarkersTaken", res.MarkersTaken, 1, "one marker for all historical gaps"),
	)
	got := rows(t, db)
	wantPlaceholders(t, got, 3, 4, 5, 7, 8)
}

// A young outbox whose very first writers rolled back: the consumer starts
// at 0 and must not wait on sequence 1 forever.
func TestYoungOutboxFillsFromTheStart(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.Burn(t, 2)    // 1, 2
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
	commit(t, db, 1)               // 1
	historical, _ := db.Burn(t, 1) // 2: a gap present at the first run
	commit(t, db, 1)               // 3: the first run's head
	old := openWriter(t, db)       // an older transaction holds the proof back
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
	counts.Want(t, "first run", counts.Of("MarkersTaken", res.MarkersTaken, 1), counts.Of("Head", res.Head, 3))

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
	testdb.Exec(t, db.Pool, `DELETE FROM outbox.events WHERE sequence <= 3`)
	cfg := testConfig()
	cfg.PageSize = 2
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	counts.Want(t, "", counts.Of("Filled", res.Filled, 0), counts.Of("Watermark", res.Watermark, 6))
	if got := rows(t, db); len(got) != 3 {
		t.Errorf("rows = %v, want only 4..6", got)
	}
}

// The empty table whose head lies more than a page above the start: its
// writers rolled back (or their rows were deleted). The first pass anchors
// at 0 and proves them; proven, they are passed over without a
// placeholder, and the first row to come is read from where they end.
func TestEmptyTableProvenPrefixIsPassedOver(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	db.Burn(t, 3)
	cfg := testConfig()
	cfg.PageSize = 2
	s := newService(t, db.Pool, cfg, Options{})
	res := runPass(t, s)
	if !res.Started {
		t.Errorf("first pass: Started = false, want true; %v", res)
	}
	counts.Want(t, "first pass",
		counts.Of("Filled", res.Filled, 0, "1..3 passed over, not written"),
		counts.Of("PassedOver", res.PassedOver, 3),
		counts.Of("MarkersTaken", res.MarkersTaken, 1, "the one proof that allows it"),
	)
	wantCaughtUp(t, res)
	counts.Want(t, "first pass", counts.Of("Head", res.Head, 3), counts.Of("Watermark", res.Watermark, 3))
	commit(t, db, 1) // 4
	res = runPass(t, s)
	counts.Want(t, "next pass", counts.Of("Filled", res.Filled, 0), counts.Of("Watermark", res.Watermark, 4))
	if got := rows(t, db); len(got) != 1 {
		t.Errorf("rows = %v, want only 4", got)
	}
}

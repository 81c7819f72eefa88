package fill

import (
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// A fill cycle reads its proven range ten FILL_PAGE_SIZE pages a
// statement, never more than the largest page a setting allows.
func TestCyclePageIsTenPagesAtMostTheLargest(t *testing.T) {
	for _, c := range []struct{ page, want int }{{1, 10}, {1000, 10_000}, {10_000, 100_000}, {100_000, 100_000}} {
		if got := cyclePageSize(c.page); got != c.want {
			t.Errorf("cyclePageSize(%d) = %d, want %d", c.page, got, c.want)
		}
	}
}

// The first pass over 20,000 sequences with every tenth missing (the
// first run of the outbox, 2,000 gaps) fills them all in a handful of
// statements: its page reads are ten FILL_PAGE_SIZE pages each, so the
// pass is its inserts and its bookkeeping, not eighteen page reads more.
func TestFirstPassReadsItsRangeInFewStatements(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const n = 20_000
	testdb.Exec(t, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
		SELECT g, 't', '{}' FROM generate_series(1, $1::bigint) g WHERE g % 10 <> 0`, n)
	testdb.Exec(t, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1::bigint)`, n)
	cfg := Config{Bounded: true, Grace: pass.Off, PassBudget: 30 * time.Second}.WithDefaults()

	res := runPass(t, newService(t, db.Pool, cfg, Options{}))

	if res.Filled != n/10 {
		t.Errorf("Filled = %d, want %d", res.Filled, n/10)
	}
	if res.Watermark != n {
		t.Errorf("Watermark = %d, want %d", res.Watermark, n)
	}
	// Lease and state, the head, a page, the marker, the proof, two page
	// reads of the cycle, two inserts, save and release: about a dozen.
	if res.Statements > 14 {
		t.Errorf("the pass took %d statements, want at most 14 (%v)", res.Statements, res)
	}
	t.Logf("%d statements, %d ms", res.Statements, res.DurationMS)
}

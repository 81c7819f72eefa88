package fill

import (
	"strings"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
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
// first run of the outbox, 2,000 gaps) reads the 18,000 present rows of
// its cycle in two page reads, ten FILL_PAGE_SIZE pages each, not
// eighteen: each page read is a statement, through a pooler a hop and a
// check too. Each tick's own page read, from the watermark, comes on top.
func TestFirstPassReadsItsRangeInFewStatements(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	const n = 20_000
	testdb.Exec(t, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
		SELECT g, 't', '{}' FROM generate_series(1, $1::bigint) g WHERE g % 10 <> 0`, n)
	testdb.Exec(t, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1::bigint)`, n)
	cfg := Config{Bounded: true, Grace: pass.Off, PassBudget: 30 * time.Second}.WithDefaults()
	rec := &recorder{Q: db.Pool}

	res := runPass(t, newService(t, rec, cfg, Options{}))

	if res.Filled != n/10 {
		t.Errorf("Filled = %d, want %d", res.Filled, n/10)
	}
	if res.Watermark != n {
		t.Errorf("Watermark = %d, want %d", res.Watermark, n)
	}
	reads := 0
	for _, sql := range rec.statements() {
		if strings.HasPrefix(sql, store.EventsSQL.Tag("present_after")) {
			reads++
		}
	}
	if want := 2 + int(res.Ticks); reads > want {
		t.Errorf("%d page reads in %d ticks, want at most %d: two for the cycle, one a tick", reads, res.Ticks, want)
	}
	t.Logf("%d page reads, %d statements in %d ticks, %d ms", reads, res.Statements, res.Ticks, res.DurationMS)
}

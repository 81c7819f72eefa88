package fill

import (
	"context"
	"testing"
	"time"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/counts"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// Cycles: one grace, one marker and one proof for every gap the marker
// can cover, however many pages and batches that is.

func TestScatteredGapsClosedInOneCycle(t *testing.T) {
	t.Parallel()
	db := startedDB(t)
	const n, every = 10_000, 5 // 2,000 gaps scattered among 10,000 new sequences
	first := head(t, db) + 1
	testdb.Exec(t, db.Pool, `INSERT INTO outbox.events (sequence, topic, payload)
		SELECT g, 't', '{}' FROM generate_series($1::bigint, $2::bigint) g WHERE g % $3 <> 0`, first, first+n-1, every)
	testdb.Exec(t, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, first+n-1)
	gaps := int64(0)
	for s := first; s < first+n; s++ {
		if s%every == 0 {
			gaps++
		}
	}

	cfg := testConfig()
	cfg.PageSize, cfg.BatchLimit = 500, 500
	rec := &recorder{Q: db.Pool}
	res := runPass(t, newService(t, rec, cfg, Options{}))
	if res.Filled != gaps {
		t.Errorf("Filled = %d, want all %d gaps", res.Filled, gaps)
	}
	counts.Want(t, "", counts.Of("Cycles", res.Cycles, 1), counts.Of("MarkersTaken", res.MarkersTaken, 1, "one proof for every page"))
	if res.Watermark != first+n-1 {
		t.Errorf("Watermark = %d, want the head %d", res.Watermark, first+n-1)
	}
	if res.Waiting != nil {
		t.Errorf("Waiting = %s, want caught up", res.WaitingFor())
	}
	if inserts := rec.inserts(); int64(inserts) != gaps/int64(cfg.BatchLimit) {
		t.Errorf("inserts = %d, want %d full batches of %d", inserts, gaps/int64(cfg.BatchLimit), cfg.BatchLimit)
	}
	var placeholders int64
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM outbox.events WHERE filled_by = 'fill' AND sequence % $1 = 0 AND sequence >= $2`, every, first).Scan(&placeholders); err != nil {
		t.Fatal(err)
	}
	if placeholders != gaps {
		t.Errorf("placeholders at the burned sequences = %d, want %d", placeholders, gaps)
	}
}

// A gap of 200,000 sequences that appears after the fill has started (a
// live gap, with a grace) is closed by one pass: one cycle, batch after
// batch, not a window a pass.
func TestLiveGapOf200kClosedInOnePass(t *testing.T) {
	t.Parallel()
	db := startedDB(t)
	const gap = 200_000
	from := head(t, db)
	testdb.Exec(t, db.Pool, `SELECT setval('outbox.events_sequence_seq', $1)`, from+gap)
	top := commit(t, db, 1)

	cfg := testConfig()
	cfg.PassBudget = 25 * time.Second // far above what the writes take
	res := runPass(t, newService(t, db.Pool, cfg, Options{}))
	if res.Filled != gap {
		t.Errorf("Filled = %d, want %d", res.Filled, gap)
	}
	counts.Want(t, "", counts.Of("Cycles", res.Cycles, 1), counts.Of("MarkersTaken", res.MarkersTaken, 1))
	if res.Watermark != top {
		t.Errorf("Watermark = %d, want %d", res.Watermark, top)
	}
	if res.Historical {
		t.Error("a gap allocated after the first run was taken for a historical one")
	}
	t.Logf("200k live gap: %d statements, %d ms", res.Statements, res.DurationMS)
}

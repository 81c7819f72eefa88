package compensate

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/coldplan"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
)

// checkXIDs is a batch of n distinct xids for the check: half ended long
// ago (committed, aborted or too old alike), half above xmax, where the
// check asks pg_locks.
func checkXIDs(xmax uint64, n int) []uint64 {
	xids := make([]uint64, n)
	for i := range xids {
		xids[i] = max(3, xmax-uint64(n/2)) + uint64(i)
	}
	return xids
}

// BenchmarkColdCheck is compensate's check for row 12 of BENCHMARKS.md
// (BenchmarkColdStatistics in internal/testkit/coldplan has every other
// statement): one statement over a batch of 1,000 and of 10,000 distinct
// xids (100 and 1,000 under -short), alternating which goes first.
// Target: the large batch ≤ 12 × the small one. It logs the plan and
// reports the nodes that did more work than the batch allows (want none).
func BenchmarkColdCheck(b *testing.B) {
	small, big := benchkit.Size(1_000, 100), benchkit.Size(10_000, 1_000)
	db := testdb.New(b)
	ctx := context.Background()
	sql := checkFile.Statement("check", db.Schema.Name())
	var xmax uint64
	if err := db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax); err != nil {
		b.Fatal(err)
	}
	check := func(conn *pgx.Conn, n int) {
		rows, err := coldplan.Bounded(conn).Query(ctx, sql, checkArgs(checkXIDs(xmax, n)))
		if err != nil {
			b.Fatal(err)
		}
		got := 0
		for rows.Next() {
			got++
		}
		if err := rows.Err(); err != nil || got != n {
			b.Fatalf("check of %d xids: %d rows, %v", n, got, err)
		}
	}

	excess := 0
	for _, n := range []int{small, big} {
		rec, err := coldplan.Record(ctx, db.DirectURL)
		if err != nil {
			b.Fatal(err)
		}
		check(rec.Conn, n)
		plans, err := rec.Take()
		if err != nil {
			b.Fatal(err)
		}
		for _, p := range plans {
			if p.Root.Type != "Seq Scan" { // allocation_head's own reads of its sequence
				b.Logf("plan BenchmarkColdCheck compensate-check@%d: %s", n, coldplan.Compact(p))
			}
		}
		for _, e := range coldplan.Check(plans, n) {
			excess++
			b.Logf("compensate-check@%d: %s", n, e)
		}
		rec.Close()
	}

	cfg, err := pgx.ParseConfig(db.DirectURL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
	samples := benchkit.Repeat(b,
		benchkit.Arm{Name: "small", Run: func() time.Duration { return benchkit.Timed(func() { check(conn, small) }) }},
		benchkit.Arm{Name: "big", Run: func() time.Duration { return benchkit.Timed(func() { check(conn, big) }) }},
	)
	lo, hi := samples.Median("small"), samples.Median("big")
	b.ReportMetric(float64(small), "batch-small")
	b.ReportMetric(float64(big), "batch-big")
	b.ReportMetric(float64(excess), "excess-nodes")
	b.ReportMetric(lo*1000, "compensate-check-small-ms")
	b.ReportMetric(hi*1000, "compensate-check-big-ms")
	b.ReportMetric(hi/lo, "compensate-check-big/small")
}

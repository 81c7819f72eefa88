package prune_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/prune"
)

// bareDeletes are the database's limit for the same work: one DELETE per
// table of the very rows the pass deletes, each one transaction.
var bareDeletes = []string{
	`DELETE FROM outbox.deliveries WHERE state = 'acked' AND acked_at < now() - interval '24 hours'`,
	`DELETE FROM outbox.events WHERE recorded_at < now() - interval '24 hours'
		AND sequence <= (SELECT max(watermark) FROM outbox.fill_state)`,
}

// BenchmarkPrune: 1M deliveries acked two days ago and 1M events recorded
// two days ago (below the fill watermark, no consumer registered), deleted
// by prune passes with the template's settings (batches of 5000, a 20 s
// budget; passes follow each other until one says nothing is left, as the
// hourly schedule would carry on) and by the limit, one bare DELETE per
// table; every arm on its own copy of the same rows, alternating.
// Reported: rows/s each way and the share, the longest statement of the
// passes (each one transaction, so the longest any of its locks is held)
// against the bare DELETEs'. Target: ≥ 0.5 × the limit's rows/s, no lock
// held longer than one batch.
func BenchmarkPrune(b *testing.B) {
	n := benchkit.Size(1_000_000, 20_000)
	fresh := pastRetention(b, n)
	rows := float64(2 * n)
	samples := benchkit.Samples{}
	var passes, longestBatchMS, longestBareMS []float64
	rep := 0
	for b.Loop() {
		samples.Alternate(rep,
			benchkit.Arm{Name: "prune", Run: func() time.Duration {
				db := fresh()
				l := &benchkit.TimedDB{DB: db.Pool}
				s := newPruner(b, l, templateConfig())
				var deleted int64
				count := 0
				took := benchkit.Timed(func() {
					for {
						res := run(b, s)
						count++
						deleted += res.DeletedDeliveries + res.DeletedEvents
						if !res.More {
							return
						}
					}
				})
				if deleted != int64(rows) {
					b.Fatalf("prune deleted %d rows in %d passes, want %d", deleted, count, int64(rows))
				}
				passes = append(passes, float64(count))
				longestBatchMS = append(longestBatchMS, float64(l.Longest())/1e6)
				return took
			}},
			benchkit.Arm{Name: "limit", Run: func() time.Duration {
				db := fresh()
				var deleted int64
				var slowest time.Duration
				took := benchkit.Timed(func() {
					for _, sql := range bareDeletes {
						var tag pgconn.CommandTag
						slowest = max(slowest, benchkit.Timed(func() { tag = testdb.Exec(b, db.Pool, sql) }))
						deleted += tag.RowsAffected()
					}
				})
				if deleted != int64(rows) {
					b.Fatalf("bare deletes removed %d rows, want %d", deleted, int64(rows))
				}
				longestBareMS = append(longestBareMS, float64(slowest)/1e6)
				return took
			}},
		)
		rep++
	}
	pass, limit := samples.Median("prune"), samples.Median("limit")
	b.ReportMetric(rows, "rows")
	b.ReportMetric(benchkit.Median(passes), "passes")
	b.ReportMetric(rows/pass, "prune-rows/s")
	b.ReportMetric(rows/limit, "limit-rows/s")
	b.ReportMetric(limit/pass, "prune/limit")
	b.ReportMetric(benchkit.Median(longestBatchMS), "longest-statement-ms")
	b.ReportMetric(benchkit.Median(longestBareMS), "bare-delete-ms")
	b.ReportMetric(float64(prune.DefaultBatchLimit), "batch-rows")
}

// BenchmarkPrunePooler: prune passes with the template's settings over
// 100,000 acked deliveries and 100,000 events past retention, on the
// functions' own pool straight to the server and through PgBouncer in
// transaction mode, each on its own copy of the same rows, alternating.
// Target: through the pooler ≤ 1.3 × direct.
func BenchmarkPrunePooler(b *testing.B) {
	n := benchkit.Size(100_000, 10_000)
	fresh := pastRetention(b, n)
	arm := func(name string, pooled bool) func() time.Duration {
		return func() time.Duration {
			direct, via := fresh().FunctionPools(b)
			pool := direct
			if pooled {
				pool = via
			}
			s := newPruner(b, pool, templateConfig())
			var deleted int64
			took := benchkit.Timed(func() {
				for {
					res := run(b, s)
					deleted += res.DeletedDeliveries + res.DeletedEvents
					if !res.More {
						return
					}
				}
			})
			if deleted != int64(2*n) {
				b.Fatalf("%s: deleted %d, want %d", name, deleted, 2*n)
			}
			return took
		}
	}
	benchkit.ComparePooler(b, arm("direct", false), arm("pgbouncer", true))
}

// pastRetention makes copies of a database holding n acked deliveries
// and n events, all two days old and below the fill watermark, vacuumed.
func pastRetention(b *testing.B, n int) func() *testdb.DB {
	return testdb.Seeded(b, func(ctx context.Context, conn *pgx.Conn) error {
		for _, sql := range []string{
			`INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, acked_at)
				SELECT 'agent', 'work', '\x00'::bytea, 'acked', 1, now() - interval '49 hours', now() - interval '48 hours', now() - interval '48 hours'
				FROM generate_series(1, $1::int)`,
			`INSERT INTO outbox.events (sequence, xid, topic, payload, recorded_at)
				SELECT g, '5'::xid8, 'order.placed', '{"id":1}', now() - interval '48 hours' FROM generate_series(1, $1::bigint) g`,
			`SELECT setval('outbox.events_sequence_seq', $1::bigint)`,
			`UPDATE outbox.fill_state SET started = true, watermark = $1::bigint`,
		} {
			if _, err := conn.Exec(ctx, sql, n); err != nil {
				return err
			}
		}
		_, err := conn.Exec(ctx, `VACUUM ANALYZE`)
		return err
	})
}

package sweep_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	"github.com/outboxkeeper/outboxkeeper/shared/sweep"
)

// perRowBaseline is the reference sweeper's shape (cloacina
// DeliverySweeper.sweep_once), kept here only as a baseline: list the stuck
// rows, then one compare-and-set round trip per row, then the open count.
// Stuck time is taken from delivered_at so both sides do the same work.
func perRowBaseline(ctx context.Context, q store.Querier, stuckAfter time.Duration, limit int) (int, error) {
	rows, err := q.Query(ctx, `SELECT id, state FROM outbox.deliveries
		WHERE state IN ('pending', 'delivered') AND delivered_at < now() - $1::bigint * interval '1 microsecond'
		ORDER BY delivered_at LIMIT $2`, stuckAfter.Microseconds(), limit)
	if err != nil {
		return 0, err
	}
	type stuck struct {
		id    int64
		state string
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stuck, error) {
		var s stuck
		return s, r.Scan(&s.id, &s.state)
	})
	if err != nil {
		return 0, err
	}
	reset := 0
	for _, s := range list {
		if s.state != store.StateDelivered {
			continue
		}
		tag, err := q.Exec(ctx, `UPDATE outbox.deliveries SET state = 'pending', redeliveries = redeliveries + 1
			WHERE id = $1 AND state = 'delivered'`, s.id)
		if err != nil {
			return reset, err
		}
		reset += int(tag.RowsAffected())
	}
	var open int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM outbox.deliveries WHERE state IN ('pending', 'delivered')`).Scan(&open); err != nil {
		return reset, err
	}
	return reset, nil
}

// bareUpdate is the database's limit for the sweep's work: one plain
// UPDATE of the same stuck rows to what the pass leaves them as, with no
// batches, no locks taken first, no compare-and-set and no totals.
const bareUpdate = `UPDATE outbox.deliveries SET state = 'pending', redeliveries = redeliveries + 1, delivered_at = NULL
	WHERE state = 'delivered' AND delivered_at < now() - interval '1 minute'`

// BenchmarkResetStuck: 10,000 stuck delivered rows beside 1M acked
// history rows (the bulk of a real table, which the sweep's statements must
// not scan), reset by one pass with the default batches (1000), by the
// reference's per-row compare-and-set loop and by one bare UPDATE (the
// limit), and by the pass again on a table without the history; the arms
// alternate which goes first, and every arm starts from the same restuck
// rows. Targets: the pass ≥ 0.6 × the limit's rows/s and ≥ 10 × the
// loop's; the pass with the history ≤ 1.2 × without it.
func BenchmarkResetStuck(b *testing.B) {
	n := benchkit.Size(10_000, 1_000)
	history := benchkit.Size(1_000_000, 20_000)
	ctx := context.Background()
	seed := func(acked int) *testdb.DB {
		db := testdb.New(b)
		testdb.Exec(b, db.Pool, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, delivered_at, acked_at)
			SELECT 'agent:' || g, 'work', '\x00'::bytea, 'acked', 1, now(), now() FROM generate_series(1, $1) g`, acked)
		seedDelivered(b, db, n, time.Hour)
		return db
	}
	withHistory, withoutHistory := seed(history), seed(0)
	// restick makes every row that is not history stuck again, and vacuums
	// the versions the last arm left, so each arm finds the same table.
	restick := func(db *testdb.DB) {
		testdb.Exec(b, db.Pool, `UPDATE outbox.deliveries SET state = 'delivered', redeliveries = 0,
			delivered_at = now() - interval '1 hour' WHERE state <> 'acked'`)
		testdb.Exec(b, db.Pool, `VACUUM ANALYZE outbox.deliveries`)
	}
	pass := func(db *testdb.DB) func() time.Duration {
		s := newSweeper(b, db.Pool) // SWEEP_BATCH_LIMIT default 1000
		return func() time.Duration {
			restick(db)
			var res *sweep.Result
			took := benchkit.Timed(func() { res = run(b, s) })
			if res.Reset != int64(n) {
				b.Fatalf("pass: Reset = %d, want %d", res.Reset, n)
			}
			return took
		}
	}
	samples := benchkit.Samples{}
	rep := 0
	for b.Loop() {
		samples.Alternate(rep,
			benchkit.Arm{Name: "pass", Run: pass(withHistory)},
			benchkit.Arm{Name: "pass-no-history", Run: pass(withoutHistory)},
			benchkit.Arm{Name: "per-row", Run: func() time.Duration {
				restick(withHistory)
				var got int
				var err error
				took := benchkit.Timed(func() { got, err = perRowBaseline(ctx, withHistory.Pool, time.Minute, n) })
				if err != nil || got != n {
					b.Fatalf("per-row: reset %d, want %d: %v", got, n, err)
				}
				return took
			}},
			benchkit.Arm{Name: "limit", Run: func() time.Duration {
				restick(withHistory)
				var tag pgconn.CommandTag
				took := benchkit.Timed(func() { tag = testdb.Exec(b, withHistory.Pool, bareUpdate) })
				if tag.RowsAffected() != int64(n) {
					b.Fatalf("limit: updated %d, want %d", tag.RowsAffected(), n)
				}
				return took
			}},
		)
		rep++
	}
	set, noHistory := samples.Median("pass"), samples.Median("pass-no-history")
	row, limit := samples.Median("per-row"), samples.Median("limit")
	b.ReportMetric(float64(n), "rows")
	b.ReportMetric(float64(history), "history")
	b.ReportMetric(set*1000, "pass-ms")
	b.ReportMetric(noHistory*1000, "pass-no-history-ms")
	b.ReportMetric(row*1000, "per-row-ms")
	b.ReportMetric(limit*1000, "limit-ms")
	b.ReportMetric(limit/set, "pass/limit")
	b.ReportMetric(row/set, "pass/per-row")
	b.ReportMetric(set/noHistory, "history/no-history")
}

// BenchmarkSweepPooler: one pass with the defaults over 10,000 stuck rows,
// on the functions' own pool straight to the server and through PgBouncer
// in transaction mode, alternating, every arm from the same restuck rows.
// Target: through the pooler ≤ 1.3 × direct.
func BenchmarkSweepPooler(b *testing.B) {
	n := benchkit.Size(10_000, 1_000)
	db := testdb.New(b)
	seedDelivered(b, db, n, time.Hour)
	direct, pooled := db.FunctionPools(b)
	arm := func(name string, pool pass.DB) func() time.Duration {
		s := newSweeper(b, pool)
		return func() time.Duration {
			testdb.Exec(b, db.Pool, `UPDATE outbox.deliveries SET state = 'delivered', redeliveries = 0,
				delivered_at = now() - interval '1 hour' WHERE state <> 'acked'`)
			testdb.Exec(b, db.Pool, `VACUUM ANALYZE outbox.deliveries`)
			var res *sweep.Result
			took := benchkit.Timed(func() { res = run(b, s) })
			if res.Reset != int64(n) {
				b.Fatalf("%s: Reset = %d, want %d", name, res.Reset, n)
			}
			return took
		}
	}
	benchkit.ComparePooler(b, arm("direct", direct), arm("pgbouncer", pooled))
}

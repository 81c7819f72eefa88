package sweep_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/store"
	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
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

// BenchmarkResetStuck resets N stuck rows with the set-based pass and with
// the reference's per-row loop, side by side on the same database, and
// reports both times and their ratio (per-row / set-based: how many times
// faster the set-based pass is).
func BenchmarkResetStuck(b *testing.B) {
	// history is acked rows: the bulk of a real table, which the sweep's
	// statements must not scan.
	for _, c := range []struct{ n, history int }{{1000, 0}, {10000, 0}, {1000, 200000}} {
		n := c.n
		b.Run(fmt.Sprintf("rows=%d/acked=%d", c.n, c.history), func(b *testing.B) {
			db := testdb.New(b)
			ctx := context.Background()
			exec(b, db.Pool, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, delivered_at, acked_at)
				SELECT 'agent:' || g, 'work', '\x00'::bytea, 'acked', 1, now(), now() FROM generate_series(1, $1) g`, c.history)
			seedDelivered(b, db, n, time.Hour)
			restick := func() {
				b.Helper()
				exec(b, db.Pool, `UPDATE outbox.deliveries SET state = 'delivered', redeliveries = 0,
					delivered_at = now() - interval '1 hour' WHERE state <> 'acked'`)
				exec(b, db.Pool, `VACUUM ANALYZE outbox.deliveries`)
			}
			s := newSweeper(b, db.Pool) // SWEEP_BATCH_LIMIT default 1000
			var setBased, perRow []time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				restick()
				b.StartTimer()
				t0 := time.Now()
				res, err := s.RunOnce(ctx)
				setBased = append(setBased, time.Since(t0))
				if err != nil {
					b.Fatalf("set-based: %v", err)
				}
				if res.Reset != int64(n) {
					b.Fatalf("set-based: Reset = %d, want %d", res.Reset, n)
				}

				b.StopTimer()
				restick()
				b.StartTimer()
				t0 = time.Now()
				got, err := perRowBaseline(ctx, db.Pool, time.Minute, n)
				perRow = append(perRow, time.Since(t0))
				if err != nil {
					b.Fatalf("per-row: %v", err)
				}
				if got != n {
					b.Fatalf("per-row: reset %d, want %d", got, n)
				}
			}
			// Medians: on a shared machine one pass can stall on a
			// checkpoint or a neighbour's load, and a mean would let that
			// one outlier decide the ratio.
			set, row := median(setBased), median(perRow)
			b.ReportMetric(float64(set.Microseconds())/1000, "set-ms/pass")
			b.ReportMetric(float64(row.Microseconds())/1000, "per-row-ms/pass")
			b.ReportMetric(float64(row)/float64(set), "x-faster")
		})
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

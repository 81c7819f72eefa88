package outbox_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outboxkeeper/outboxkeeper/internal/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// Benchmarks of the read side, each against the database's own limit
// measured side by side in the same run: `make bench` runs them.

// bareRangeScan is what read_events costs at the least: the same page of
// the same rows by a plain index range scan, with no watermark and no
// contiguity test.
const bareRangeScan = `SELECT sequence, xid, coalesce(topic, ''), payload, headers, recorded_at, coalesce(filled_by, '')
	FROM outbox.events WHERE sequence > $1 ORDER BY sequence LIMIT $2`

// BenchmarkReadEvents: pages of 100 (Consume's default batch) at random
// positions of a million-row table, through ReadContiguous (read_events,
// as Consume and every language call it) and through the bare range scan
// of the same page, interleaved page by page in alternating order; on the
// two pools a consumer runs on: the functions' pooler-safe one (every
// statement unnamed, QueryExecModeExec: what works behind PgBouncer and
// RDS Proxy) and pgx's default (statements prepared and cached per
// connection). Reported: ns per page each way and the limit's share,
// bare/read_events (target ≥ 0.5), for each pool.
func BenchmarkReadEvents(b *testing.B) {
	db := testdb.New(b)
	ctx := context.Background()
	rows := benchkit.Size[int64](1_000_000, 20_000)
	for _, sql := range []string{
		`INSERT INTO outbox.events (sequence, xid, topic, payload) SELECT g, '5', 'order.placed', '{"id":1,"total":"12.50"}' FROM generate_series(1, $1::bigint) g`,
		`SELECT setval('outbox.events_sequence_seq', $1::bigint)`,
		`UPDATE outbox.fill_state SET started = true, watermark = $1::bigint`,
	} {
		if _, err := db.Pool.Exec(ctx, sql, rows); err != nil {
			b.Fatalf("%s: %v", sql, err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE outbox.events`); err != nil {
		b.Fatal(err)
	}
	// pgx's defaults, as an application's own pool has them.
	appPool, err := pgxpool.New(ctx, db.DirectURL)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(appPool.Close)
	type pool struct {
		name string
		q    interface {
			Query(context.Context, string, ...any) (pgx.Rows, error)
		}
		ob *outbox.Outbox
	}
	pools := []pool{
		{"pooler-safe", db.Pool, newOutbox(b, db, outbox.Options{})},
		{"pgx-default", appPool, must(outbox.New(appPool, outbox.Options{}))},
	}
	const page = 100
	spent := map[string]time.Duration{}
	viaReadEvents := func(p pool, after int64) {
		start := time.Now()
		got, err := p.ob.ReadContiguous(ctx, after, page)
		spent[p.name+"/read_events"] += time.Since(start)
		if err != nil || len(got) != page {
			b.Fatalf("%s: read_events after %d: %d rows, %v", p.name, after, len(got), err)
		}
	}
	viaBareScan := func(p pool, after int64) {
		start := time.Now()
		r, err := p.q.Query(ctx, bareRangeScan, after, page)
		if err != nil {
			b.Fatal(err)
		}
		// Scanned into the same values ReadContiguous makes, so both
		// sides pay the same decoding.
		evs, err := pgx.CollectRows(r, pgx.RowToStructByPos[outbox.Event])
		spent[p.name+"/bare"] += time.Since(start)
		if err != nil || len(evs) != page {
			b.Fatalf("%s: bare scan after %d: %d rows, %v", p.name, after, len(evs), err)
		}
	}
	const pages = 300
	n := 0
	for b.Loop() {
		for i := range pages {
			// The same page every way, in rotating order, so none always
			// finds the others' pages warm.
			after := rand.Int64N(rows - 2*page)
			arms := []func(){
				func() { viaReadEvents(pools[0], after) }, func() { viaBareScan(pools[0], after) },
				func() { viaReadEvents(pools[1], after) }, func() { viaBareScan(pools[1], after) },
			}
			for j := range arms {
				arms[(i+j)%len(arms)]()
			}
		}
		n += pages
	}
	for _, p := range pools {
		fn, bare := spent[p.name+"/read_events"], spent[p.name+"/bare"]
		b.ReportMetric(float64(fn.Nanoseconds())/float64(n), p.name+"-read_events-ns/page")
		b.ReportMetric(float64(bare.Nanoseconds())/float64(n), p.name+"-bare-ns/page")
		b.ReportMetric(float64(bare)/float64(fn), p.name+"-bare/read_events")
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// BenchmarkPublishNotification: committed transactions of one publish
// each, from 4 concurrent writers, with the new-event notification
// switched on (set_publish_notifications) and off, in alternating rounds.
// Reported: ns per transaction each way and the ratio.
func BenchmarkPublishNotification(b *testing.B) {
	db := testdb.New(b)
	ctx := context.Background()
	ob := newOutbox(b, db, outbox.Options{})
	// A listener, as in production: notifications are queued for it.
	listener := db.Connect(b)
	if _, err := listener.Exec(ctx, `LISTEN outbox_events`); err != nil {
		b.Fatal(err)
	}
	const writers, perRound = 4, 250
	round := func() time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for range writers {
			wg.Go(func() {
				for range perRound / writers {
					if err := ob.InTx(ctx, func(ctx context.Context, tx *outbox.Tx) error {
						_, err := tx.Publish(ctx, "order.placed", map[string]any{"id": 1, "total": "12.50"})
						return err
					}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	setTrigger := func(on bool) {
		if _, err := db.Pool.Exec(ctx, `SELECT outbox.set_publish_notifications($1)`, on); err != nil {
			b.Fatal(err)
		}
	}
	drain := func() {
		for {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
			_, err := listener.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return
			}
		}
	}
	round() // warm up the pool
	var with, without time.Duration
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first, so drift favours neither.
		order := []bool{true, false}
		if i%2 == 1 {
			order = []bool{false, true}
		}
		for _, on := range order {
			setTrigger(on)
			d := round()
			if on {
				with += d
			} else {
				without += d
			}
			drain()
		}
	}
	n := float64(b.N * perRound)
	b.ReportMetric(float64(with.Nanoseconds())/n, "notify-ns/tx")
	b.ReportMetric(float64(without.Nanoseconds())/n, "plain-ns/tx")
	b.ReportMetric(float64(with)/float64(without), "notify/plain")
}

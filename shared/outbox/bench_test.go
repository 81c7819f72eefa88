package outbox_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

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

// BenchmarkReadEvents: pages of 100 at random positions of a million-row
// table, through read_events (as ReadContiguous and every language call
// it) and through the bare range scan, interleaved. Reported: ns per page
// for each and their ratio.
func BenchmarkReadEvents(b *testing.B) {
	db := testdb.New(b)
	ctx := context.Background()
	const rows = 1_000_000
	for _, sql := range []string{
		`INSERT INTO outbox.events (sequence, xid, topic, payload) SELECT g, '5', 'order.placed', '{"id":1,"total":"12.50"}' FROM generate_series(1, 1000000) g`,
		`SELECT setval('outbox.events_sequence_seq', 1000000)`,
		`UPDATE outbox.fill_state SET started = true, watermark = 1000000`,
		`VACUUM ANALYZE outbox.events`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			b.Fatalf("%s: %v", sql, err)
		}
	}
	ob := newOutbox(b, db, outbox.Options{})
	var viaFunction, bare time.Duration
	const pages = 200
	b.ResetTimer()
	viaReadEvents := func(after int64) {
		start := time.Now()
		got, err := ob.ReadContiguous(ctx, after, 100)
		viaFunction += time.Since(start)
		if err != nil || len(got) != 100 {
			b.Fatalf("read_events after %d: %d rows, %v", after, len(got), err)
		}
	}
	viaBareScan := func(after int64) {
		start := time.Now()
		r, err := db.Pool.Query(ctx, bareRangeScan, after, 100)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for r.Next() {
			n++
		}
		bare += time.Since(start)
		if r.Err() != nil || n != 100 {
			b.Fatalf("bare scan after %d: %d rows, %v", after, n, r.Err())
		}
	}
	for range b.N {
		for i := range pages {
			// The same page both ways, in alternating order, so neither
			// always finds the other's pages warm.
			after := rand.Int64N(rows - 200)
			if i%2 == 0 {
				viaReadEvents(after)
				viaBareScan(after)
			} else {
				viaBareScan(after)
				viaReadEvents(after)
			}
		}
	}
	n := float64(b.N * pages)
	b.ReportMetric(float64(viaFunction.Nanoseconds())/n, "read_events-ns/page")
	b.ReportMetric(float64(bare.Nanoseconds())/n, "bare-ns/page")
	b.ReportMetric(float64(viaFunction)/float64(bare), "read_events/bare")
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

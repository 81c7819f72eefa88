package outbox_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/outbox"
)

// BenchmarkConsumeLatency: commit → the consumer's handler, through
// Consume with its defaults, once polling (Poll 1s, the notification off)
// and once listening (the notification on, Listen set, Poll 30s), one
// event committed every 20 to 120 ms and no older transaction open. The
// two modes alternate, each on a database of its own; it reports each
// mode's p50 and p99 in milliseconds.
func BenchmarkConsumeLatency(b *testing.B) {
	events := benchkit.Size(200, 20)
	latencies := map[string][]float64{}
	for range b.N {
		for _, mode := range []string{"poll", "listen"} {
			latencies[mode] = append(latencies[mode], consumeRun(b, mode == "listen", events)...)
		}
	}
	for _, mode := range []string{"poll", "listen"} {
		all := latencies[mode]
		slices.Sort(all)
		pct := func(p float64) float64 { return all[min(len(all)-1, int(p*float64(len(all))))] }
		b.ReportMetric(pct(0.5), mode+"-p50-ms")
		b.ReportMetric(pct(0.99), mode+"-p99-ms")
	}
}

// consumeRun commits events one at a time while a consumer with the
// library's defaults reads them, and returns each one's commit → handler
// latency in milliseconds.
func consumeRun(b *testing.B, listen bool, events int) []float64 {
	b.Helper()
	db := testdb.New(b)
	ob := newOutbox(b, db, outbox.Options{})
	opts := outbox.ConsumerOptions{Name: "bench"}
	if listen {
		db.Exec(b, `SELECT outbox.set_publish_notifications(true)`)
		opts.Listen = func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, db.DirectURL) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var mu sync.Mutex
	committed, handled := map[int64]time.Time{}, map[int64]time.Time{}
	consumed := make(chan error, 1)
	go func() {
		consumed <- ob.Consume(ctx, opts, func(_ context.Context, evs []outbox.Event) error {
			at := time.Now()
			mu.Lock()
			defer mu.Unlock()
			for _, e := range evs {
				handled[e.Sequence] = at
			}
			return nil
		})
	}()
	time.Sleep(300 * time.Millisecond) // registered, and listening when it listens
	for i := range events {
		seq := testdb.Scalar[int64](b, db.Pool, `SELECT outbox.publish('orders.created', $1::jsonb)`, fmt.Sprintf(`{"n":%d}`, i))
		mu.Lock()
		committed[seq] = time.Now()
		mu.Unlock()
		time.Sleep(time.Duration(20+rand.IntN(100)) * time.Millisecond)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(handled)
		mu.Unlock()
		if n >= events || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	<-consumed
	mu.Lock()
	defer mu.Unlock()
	var out []float64
	for seq, c := range committed {
		h, ok := handled[seq]
		if !ok {
			b.Fatalf("sequence %d never reached the handler", seq)
		}
		out = append(out, float64(h.Sub(c).Microseconds())/1000)
	}
	return out
}

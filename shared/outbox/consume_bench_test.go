package outbox_test

import (
	"context"
	"fmt"
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
		b.ReportMetric(benchkit.Percentile(latencies[mode], 0.5), mode+"-p50-ms")
		b.ReportMetric(benchkit.Percentile(latencies[mode], 0.99), mode+"-p99-ms")
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

	lat := benchkit.NewLatencies()
	consumed := make(chan error, 1)
	go func() {
		consumed <- ob.Consume(ctx, opts, func(_ context.Context, evs []outbox.Event) error {
			at := time.Now()
			for _, e := range evs {
				lat.Arrived(e.Sequence, at)
			}
			return nil
		})
	}()
	time.Sleep(300 * time.Millisecond) // registered, and listening when it listens
	lat.CommitPaced(events, func(i int) int64 {
		return testdb.Scalar[int64](b, db.Pool, `SELECT outbox.publish('orders.created', $1::jsonb)`, fmt.Sprintf(`{"n":%d}`, i))
	})
	lat.Wait(events, 5*time.Second)
	cancel()
	<-consumed
	return lat.Millis(b, "sequence %d never reached the handler")
}

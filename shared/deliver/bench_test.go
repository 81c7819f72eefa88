package deliver

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// BenchmarkDeliverThroughput: a backlog of pending deliveries to one
// standard SQS queue on fauxqs, pushed by one bounded pass at the
// template's DELIVER_BATCH_LIMIT and DELIVER_CONCURRENCY (the Config's
// defaults, which infra/deploy ties to the template), side by side with
// the bare SendMessageBatch loop sending the same messages, pre-built in
// calls of ten, with the same client and concurrency and no database; and
// a third arm at the largest batch (MaxBatch). It reports each arm's
// messages per second, deliver/bare (the target: at least 0.6) and
// deliver-batch1000/bare.
func BenchmarkDeliverThroughput(b *testing.B) {
	n := benchkit.Size(10_000, 500)
	db := testdb.New(b)
	ctx := context.Background()
	client := sqs.NewFromConfig(awstest.Config(b))

	// The bare loop's batches: the envelopes deliver builds.
	bodies := make([][]byte, n)
	for i := range n {
		tenant := fmt.Sprintf("t-%d", i%97)
		bodies[i] = Envelope(delivery{ID: int64(i + 1), Recipient: "bench", Kind: "order.created", TenantID: &tenant,
			Payload: []byte(fmt.Sprintf(`{"order": %d, "total": "129.90", "items": 3}`, i))})
	}
	bare := sqstest.BareArm(b, ctx, client, sqstest.Batches(bodies), DefaultConcurrency)
	deliverArm := func(name string, batch int) benchkit.Arm {
		return benchkit.Arm{Name: name, Run: func() time.Duration {
			url := sqstest.NewQueue(b, client, "bench-"+name, nil)
			db.Exec(b, `TRUNCATE outbox.deliveries, outbox.recipients`)
			db.Exec(b, `INSERT INTO outbox.recipients (name, target) VALUES ('bench', $1)`, url)
			db.Exec(b, `INSERT INTO outbox.deliveries (recipient, kind, tenant_id, payload)
				SELECT 'bench', 'order.created', 't-' || (g - 1) % 97,
					convert_to(format('{"order": %s, "total": "129.90", "items": 3}', g - 1), 'UTF8')
				FROM generate_series(1, $1) g`, n)
			db.Exec(b, `VACUUM ANALYZE outbox.deliveries`)
			s := newTestService(b, db, Config{BatchLimit: batch, Bounded: true, PassBudget: 10 * time.Minute})
			return benchkit.Timed(func() {
				res, err := s.RunOnce(ctx, nil)
				if err != nil || res.Delivered != int64(n) {
					b.Fatalf("%s: delivered %d of %d: %v %s", name, res.Delivered, n, err, pass.String(res))
				}
			})
		}}
	}
	// A zero BatchLimit and Concurrency are the defaults, the template's.
	benchkit.CompareRates(b, n, bare, deliverArm("deliver", 0), deliverArm("deliver-batch1000", MaxBatch))
}

// BenchmarkClaimBesideHistory: the claim statement's cost per batch (the
// buffers it touches, the function's own work included, and its time)
// beside 10,000 and beside 1,000,000 acked deliveries of history (10,000
// and 100,000 under -short), each with a backlog of 1,000 pending; batch
// 100, ten batches each. Target: the same buffers per batch (large/small
// at most 1.2).
func BenchmarkClaimBesideHistory(b *testing.B) {
	ctx := context.Background()
	small, large := 10_000, benchkit.Size(1_000_000, 100_000)
	const pending, batch, batches = 1_000, 100, 10
	type figures struct{ buffers, ms float64 }
	measure := func(history int) figures {
		db := testdb.New(b)
		db.Exec(b, `INSERT INTO outbox.deliveries (recipient, kind, payload, state, attempts, created_at, delivered_at, acked_at)
			SELECT 'bench', 'k', '{}'::bytea, 'acked', 1, now() - interval '2 days', now() - interval '2 days', now() - interval '1 day'
			FROM generate_series(1, $1)`, history)
		db.Exec(b, `INSERT INTO outbox.deliveries (recipient, kind, payload) SELECT 'bench', 'k', '{}'::bytea FROM generate_series(1, $1)`, pending)
		db.Exec(b, `INSERT INTO outbox.recipients (name, target) VALUES ('bench', 'https://example.com/in')`)
		db.Exec(b, `VACUUM ANALYZE outbox.deliveries`)
		var f figures
		for range batches {
			var plan []struct {
				Plan struct {
					Hit  float64 `json:"Shared Hit Blocks"`
					Read float64 `json:"Shared Read Blocks"`
					Rows float64 `json:"Actual Rows"`
				} `json:"Plan"`
				Time float64 `json:"Execution Time"`
			}
			var raw []byte
			if err := db.Pool.QueryRow(ctx, `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT * FROM outbox.deliver_claim($1)`, batch).Scan(&raw); err != nil {
				b.Fatal(err)
			}
			if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 || plan[0].Plan.Rows != batch {
				b.Fatalf("claim beside %d: %s (%v)", history, raw, err)
			}
			f.buffers += (plan[0].Plan.Hit + plan[0].Plan.Read) / batches
			f.ms += plan[0].Time / batches
		}
		return f
	}
	b.ResetTimer()
	var s, l figures
	for range b.N {
		s, l = measure(small), measure(large)
	}
	b.StopTimer()
	b.ReportMetric(s.buffers, "buffers/batch@10k")
	b.ReportMetric(l.buffers, fmt.Sprintf("buffers/batch@%dk", large/1000))
	b.ReportMetric(l.buffers/s.buffers, "large/small")
	b.ReportMetric(s.ms, "ms/batch@10k")
	b.ReportMetric(l.ms, fmt.Sprintf("ms/batch@%dk", large/1000))
}

package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/jackc/pgx/v5"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testdb"
	"github.com/outboxkeeper/outboxkeeper/shared/pass"
	relaysql "github.com/outboxkeeper/outboxkeeper/shared/relay/parked"
	"github.com/outboxkeeper/outboxkeeper/shared/target"
)

const benchConcurrency = 4

// benchPayload is an order of a realistic size, the same as
// shared/target's BenchmarkBareSend sends.
func benchPayload(i int) string {
	return fmt.Sprintf(`{"order": %d, "customer": "c-%d", "total": "129.90", "items": 3}`, i, i%97)
}

// BenchmarkRelayThroughput: a backlog of committed events relayed to a
// standard SQS queue on fauxqs by one bounded pass (RELAY_CONCURRENCY=4,
// RELAY_GROUP_BY=none, the default batch), side by side with the bare
// SendMessageBatch loop sending the same envelopes, pre-built in calls of
// ten, with the same client and concurrency and no database. It reports
// each arm's messages per second and relay/bare (the target: at least
// 0.7).
func BenchmarkRelayThroughput(b *testing.B) {
	n := benchkit.Size(100_000, 1_000)
	db := testdb.New(b)
	ctx := context.Background()
	db.Exec(b, `INSERT INTO outbox.events (sequence, xid, topic, payload)
		SELECT g, pg_current_xact_id(), 'orders.created',
			jsonb_build_object('order', g, 'customer', 'c-' || g % 97, 'total', '129.90', 'items', 3)
		FROM generate_series(1, $1) g`, n)
	db.Exec(b, `SELECT setval('outbox.events_sequence_seq', $1)`, n)
	db.Exec(b, `UPDATE outbox.fill_state SET started = true, watermark = $1`, n)
	db.Exec(b, `VACUUM ANALYZE outbox.events`)

	// The bare loop's batches: the envelopes the relay builds, read back.
	rows, err := db.Pool.Query(ctx, `SELECT sequence, topic, payload, headers, recorded_at FROM outbox.events ORDER BY sequence`)
	if err != nil {
		b.Fatal(err)
	}
	var bodies [][]byte
	for rows.Next() {
		var e target.Event
		if err := rows.Scan(&e.Sequence, &e.Topic, &e.Payload, &e.Headers, &e.RecordedAt); err != nil {
			b.Fatal(err)
		}
		body, err := target.Envelope(e)
		if err != nil {
			b.Fatal(err)
		}
		bodies = append(bodies, body)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	client := sqs.NewFromConfig(awstest.Config(b))

	bare := sqstest.BareArm(b, ctx, client, sqstest.Batches(bodies), benchConcurrency)
	relay := benchkit.Arm{Name: "relay", Run: func() time.Duration {
		url := sqstest.NewQueue(b, client, "bench-relay", nil)
		s := newTestService(b, db, Config{Target: url, GroupBy: GroupByNone, Concurrency: benchConcurrency, Bounded: true, PassBudget: 10 * time.Minute})
		db.Exec(b, `DELETE FROM outbox.consumers WHERE name = 'relay:default'`)
		return benchkit.Timed(func() {
			res, err := s.RunOnce(ctx, nil)
			if err != nil || res.Sent != int64(n) {
				b.Fatalf("relay: sent %d of %d: %v %s", res.Sent, n, err, pass.String(res))
			}
		})
	}}
	benchkit.CompareRates(b, n, bare, relay)
}

// BenchmarkRelayLatency: commit → message visible in an SQS queue on
// fauxqs, with a watching relay at RELAY_TICK=200ms and the template's
// settings otherwise, one event committed every 20 to 120 ms and no
// older transaction open, read by a consumer long-polling the queue. It
// reports the latency's p50 and p99 in milliseconds (the target: p99 at
// most 1 s).
func BenchmarkRelayLatency(b *testing.B) {
	events := benchkit.Size(400, 25)
	client := sqs.NewFromConfig(awstest.Config(b))
	var all []float64
	b.ResetTimer()
	for range b.N {
		all = append(all, latencyRun(b, client, events)...)
	}
	b.StopTimer()
	b.ReportMetric(benchkit.Percentile(all, 0.5), "p50-ms")
	b.ReportMetric(benchkit.Percentile(all, 0.99), "p99-ms")
	b.ReportMetric(benchkit.Percentile(all, 1), "max-ms")
}

// latencyRun relays events commits once and returns each one's latency
// in milliseconds.
func latencyRun(b *testing.B, client *sqs.Client, events int) []float64 {
	b.Helper()
	db := testdb.New(b)
	url := sqstest.NewQueue(b, client, "bench-latency", nil)
	s := newTestService(b, db, Config{Target: url, Tick: DefaultTick, PassBudget: time.Duration(events)*120*time.Millisecond + 5*time.Second})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	lat := benchkit.NewLatencies()
	relayed := make(chan error, 1)
	go func() {
		_, err := s.RunOnce(ctx, nil)
		relayed <- err
	}()
	go func() {
		for ctx.Err() == nil {
			out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
			if err != nil {
				continue
			}
			at := time.Now()
			for _, m := range out.Messages {
				var e struct {
					Sequence int64 `json:"sequence"`
				}
				if json.Unmarshal([]byte(aws.ToString(m.Body)), &e) == nil {
					lat.Arrived(e.Sequence, at)
				}
				_, _ = client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
			}
		}
	}()
	time.Sleep(300 * time.Millisecond) // the pass has taken its lease
	lat.CommitPaced(events, func(i int) int64 {
		return testdb.Scalar[int64](b, db.Pool, `SELECT outbox.publish('orders.created', $1::jsonb)`, benchPayload(i))
	})
	lat.Wait(events, 10*time.Second)
	cancel()
	<-relayed
	return lat.Millis(b, "sequence %d never arrived")
}

// BenchmarkRelayIdleTick: a watching relay with nothing to send, caught up
// at the head of tables of 100,000 and 10,000,000 events, each pass 3 s at
// the template's RELAY_TICK, alternating. It reports, per size, the
// statements per tick (the pass's own count), the database time per tick
// (every statement timed) and the shared buffers the tick's probe touches
// (EXPLAIN (ANALYZE, BUFFERS) of the statement the lease poll carries),
// and each at 10M over at 100k (the target: constant).
func BenchmarkRelayIdleTick(b *testing.B) {
	sizes := benchkit.Size([]int64{100_000, 10_000_000}, []int64{10_000, 100_000})
	client := sqs.NewFromConfig(awstest.Config(b))
	url := sqstest.NewQueue(b, client, "bench-idle", nil)
	dbs := map[int64]*testdb.DB{}
	for _, n := range sizes {
		db := testdb.New(b)
		db.Exec(b, `INSERT INTO outbox.events (sequence, xid, topic, payload)
			SELECT g, pg_current_xact_id(), 'orders.created', '{}' FROM generate_series(1, $1::bigint) g`, n)
		db.Exec(b, `SELECT setval('outbox.events_sequence_seq', $1)`, n)
		db.Exec(b, `UPDATE outbox.fill_state SET started = true, watermark = $1`, n)
		db.Exec(b, `VACUUM ANALYZE outbox.events`)
		// RELAY_START=latest registers the relay at the watermark, the
		// head: caught up without sending the table.
		if r, err := newTestService(b, db, Config{Target: url, Start: StartLatest, Bounded: true}).RunOnce(context.Background(), nil); err != nil || r.Position != n {
			b.Fatalf("registering at %d: position %d, %v", n, r.Position, err)
		}
		dbs[n] = db
	}
	ticks, buffers := benchkit.NewPerTick(), map[int64]float64{}
	for _, n := range sizes {
		buffers[n] = probeBuffers(b, dbs[n])
	}
	watch := func(n int64) benchkit.Arm {
		return benchkit.Arm{Name: fmt.Sprint(n), Run: func() time.Duration {
			t := &benchkit.TimedDB{DB: dbs[n].Pool}
			s := newTestService(b, dbs[n], Config{Target: url, PassBudget: 3 * time.Second})
			s.kit.DB = t
			r, err := s.RunOnce(context.Background(), nil)
			if err != nil || r.Sent != 0 || r.Ticks == 0 {
				b.Fatalf("idle pass at %d: sent %d ticks %d: %v", n, r.Sent, r.Ticks, err)
			}
			return ticks.Record(n, r.Statements, r.Ticks, t.Total())
		}}
	}
	benchkit.Repeat(b, benchkit.Each(sizes, watch)...)
	ticks.Report(b, sizes)
	for _, n := range sizes {
		b.ReportMetric(buffers[n], fmt.Sprintf("probe-buffers@%d", n))
	}
	small, large := sizes[0], sizes[len(sizes)-1]
	b.ReportMetric(buffers[large]/buffers[small], "buffers/smallest-table")
}

// probeBuffers is the shared buffers (hit and read) the idle tick's probe
// touches, from EXPLAIN (ANALYZE, BUFFERS) of the relay's readable
// statement, run twice so the second finds the pages cached as a watching
// pass does.
func probeBuffers(b *testing.B, db *testdb.DB) float64 {
	b.Helper()
	stmt := relaysql.SQL.Statement("readable", testdb.Schema)
	var plan []struct {
		Plan struct {
			Hit  float64 `json:"Shared Hit Blocks"`
			Read float64 `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	for range 2 {
		var raw []byte
		if err := db.Pool.QueryRow(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+stmt,
			pgx.NamedArgs{"name": ConsumerName(DefaultName)}).Scan(&raw); err != nil {
			b.Fatal(err)
		}
		if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
			b.Fatalf("EXPLAIN: %s: %v", raw, err)
		}
	}
	return plan[0].Plan.Hit + plan[0].Plan.Read
}

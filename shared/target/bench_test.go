package target

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/awstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
)

// BenchmarkBareSend is the baseline of the relay's throughput: the same
// pre-built envelopes sent to a standard SQS queue on fauxqs in calls of
// ten, by a bare SendMessageBatch loop (sqstest.BareSend) and by the
// Sender, with the same client construction and concurrency, side by side.
// It reports each arm's messages per second and sender/bare; the relay's
// benchmark puts its own arm beside the same bare loop.
func BenchmarkBareSend(b *testing.B) {
	const concurrency = 4
	n := benchkit.Size(20_000, 500)
	awsCfg := awstest.Config(b)
	client := sqs.NewFromConfig(awsCfg)

	msgs := make([]Message, n)
	var batches [][]types.SendMessageBatchRequestEntry
	for i := range msgs {
		body, err := Envelope(Event{Sequence: int64(i + 1), Topic: "orders.created", RecordedAt: time.Now(),
			Payload: []byte(fmt.Sprintf(`{"order":%d,"customer":"c-%d","total":"129.90","items":3}`, i, i%97))})
		if err != nil {
			b.Fatal(err)
		}
		msgs[i] = Message{ID: fmt.Sprint(i), Body: body}
		if i%10 == 0 {
			batches = append(batches, nil)
		}
		last := &batches[len(batches)-1]
		*last = append(*last, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(i % 10)), MessageBody: aws.String(string(body))})
	}

	bare := benchkit.Arm{Name: "bare", Run: func() time.Duration {
		url := sqstest.NewQueue(b, client, "bench-bare", nil)
		return benchkit.Timed(func() {
			if err := sqstest.BareSend(context.Background(), client, url, batches, concurrency); err != nil {
				b.Fatal(err)
			}
		})
	}}
	sender := benchkit.Arm{Name: "sender", Run: func() time.Duration {
		url := sqstest.NewQueue(b, client, "bench-sender", nil)
		tgt, err := Parse(url)
		if err != nil {
			b.Fatal(err)
		}
		s, err := New(awsCfg, Config{Target: tgt, Concurrency: concurrency})
		if err != nil {
			b.Fatal(err)
		}
		return benchkit.Timed(func() {
			if res := s.Send(context.Background(), msgs); res.Sent != n {
				b.Fatalf("sender: %d of %d sent (%+v)", res.Sent, n, res.Outcomes[0])
			}
		})
	}}
	benchkit.CompareRates(b, n, bare, sender)
}

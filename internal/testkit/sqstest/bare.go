package sqstest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
)

// Batches packs bodies, in order, into SendMessageBatch entries ten to a
// call (the API's limit), each entry's Id its index in its batch: what a
// sender's baseline sends.
func Batches(bodies [][]byte) [][]types.SendMessageBatchRequestEntry {
	var batches [][]types.SendMessageBatchRequestEntry
	for i, body := range bodies {
		if i%10 == 0 {
			batches = append(batches, nil)
		}
		last := &batches[len(batches)-1]
		*last = append(*last, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(len(*last))), MessageBody: aws.String(string(body))})
	}
	return batches
}

// BareArm is the benchmark arm "bare": BareSend of batches to a fresh
// queue with concurrency workers, timed; the baseline a relay's or a
// deliver's throughput is a ratio of.
func BareArm(b testing.TB, ctx context.Context, c *sqs.Client, batches [][]types.SendMessageBatchRequestEntry, concurrency int) benchkit.Arm {
	return benchkit.Arm{Name: "bare", Run: func() time.Duration {
		url := NewQueue(b, c, "bench-bare", nil)
		return benchkit.Timed(func() {
			if err := BareSend(ctx, c, url, batches, concurrency); err != nil {
				b.Fatal(err)
			}
		})
	}}
}

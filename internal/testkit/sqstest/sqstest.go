// Package sqstest talks to the fauxqs SQS emulator of the local stack with
// the real aws-sdk-go-v2 client: a fresh queue per test, and helpers to read
// what arrived.
package sqstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/benchkit"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// Client returns an SQS client pointed at the emulator.
func Client(t testing.TB) *sqs.Client {
	t.Helper()
	endpoint := testenv.Require(t, "AWS_ENDPOINT_URL_SQS")
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	})
}

// NewQueue creates a uniquely named queue with the given attributes and
// deletes it after the test. It returns the queue URL. A FIFO queue
// (FifoQueue "true") gets the .fifo suffix SQS requires of its name.
func NewQueue(t testing.TB, c *sqs.Client, prefix string, attrs map[string]string) string {
	t.Helper()
	name := Name(prefix)
	if attrs["FifoQueue"] == "true" {
		name += ".fifo"
	}
	out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("sqstest: create queue %s: %v", name, err)
	}
	url := aws.ToString(out.QueueUrl)
	t.Cleanup(func() { _, _ = c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(url)}) })
	return url
}

// Name is a unique resource name with the prefix: tests running at once,
// in one process or several, never share a queue.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// Redriven is a source queue whose redrive policy moves a message to a
// queue of its own after MaxReceiveCount receives.
type Redriven struct {
	URL, ARN string
	// Redrive is the URL of the queue the policy moves messages to.
	Redrive string
}

// NewRedrivenQueue creates a redrive target and a source queue with attrs
// and a redrive policy to it after maxReceiveCount receives, both deleted
// after the test. The queues' names start with prefix.
func NewRedrivenQueue(t testing.TB, c *sqs.Client, prefix string, maxReceiveCount int, attrs map[string]string) Redriven {
	t.Helper()
	var q Redriven
	q.Redrive = NewQueue(t, c, prefix+"-redrive", nil)
	policy, err := json.Marshal(map[string]any{"deadLetterTargetArn": QueueARN(t, c, q.Redrive), "maxReceiveCount": maxReceiveCount})
	if err != nil {
		t.Fatal(err)
	}
	all := map[string]string{"RedrivePolicy": string(policy)}
	for k, v := range attrs {
		all[k] = v
	}
	q.URL = NewQueue(t, c, prefix+"-src", all)
	q.ARN = QueueARN(t, c, q.URL)
	return q
}

// QueueARN returns the ARN of a queue (for redrive policies).
func QueueARN(t testing.TB, c *sqs.Client, url string) string {
	t.Helper()
	out, err := c.GetQueueAttributes(context.Background(), &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		t.Fatalf("sqstest: queue ARN: %v", err)
	}
	return out.Attributes[string(types.QueueAttributeNameQueueArn)]
}

// DrainVisibility is the visibility timeout of Drain's receives. A
// receive whose answer is lost on the way (the SDK then receives again)
// leaves its messages in flight; they come back within a test's wait
// rather than after SQS's default 30 s.
const DrainVisibility = 2

// Drain receives (and deletes) messages until want distinct ones have
// arrived or the timeout passes, and returns what arrived, each message
// once: one received again after its visibility ran out (a lost answer, a
// slow delete) is the same MessageId, not a second delivery.
func Drain(t testing.TB, c *sqs.Client, url string, want int, timeout time.Duration) []types.Message {
	t.Helper()
	ctx := context.Background()
	var got []types.Message
	seen := map[string]bool{}
	deadline := time.Now().Add(timeout)
	for len(got) < want && time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(url),
			MaxNumberOfMessages:         10,
			WaitTimeSeconds:             1,
			VisibilityTimeout:           DrainVisibility,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("sqstest: receive: %v", err)
		}
		for _, m := range out.Messages {
			if id := aws.ToString(m.MessageId); !seen[id] {
				seen[id] = true
				got = append(got, m)
			}
			_, _ = c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
		}
	}
	return got
}

// BareSend sends pre-built batches to the queue with SendMessageBatch from
// concurrency workers, and does nothing else: no planning, no outcome per
// message, no database. It is the baseline a sender's (and the relay's)
// throughput is measured against, with the same client and concurrency.
// It returns the first error of a call, or of an entry the queue refused.
func BareSend(ctx context.Context, c *sqs.Client, url string, batches [][]types.SendMessageBatchRequestEntry, concurrency int) error {
	work := make(chan []types.SendMessageBatchRequestEntry)
	errs := make(chan error, concurrency)
	for range concurrency {
		go func() {
			var first error
			for b := range work {
				out, err := c.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: b})
				switch {
				case err != nil && first == nil:
					first = err
				case err == nil && len(out.Failed) > 0 && first == nil:
					first = fmt.Errorf("sqstest: entry %s refused: %s", aws.ToString(out.Failed[0].Id), aws.ToString(out.Failed[0].Code))
				}
			}
			errs <- first
		}()
	}
	for _, b := range batches {
		work <- b
	}
	close(work)
	var first error
	for range concurrency {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

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

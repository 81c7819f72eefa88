package local

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/rie"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/syncbuf"
	"github.com/outboxkeeper/outboxkeeper/internal/testkit/testenv"
)

// The event source mapping, against fauxqs and a real bootstrap under
// rie: successes are deleted after one delivery, a failed
// item comes back after the visibility timeout with a growing
// ApproximateReceiveCount, and the queue's redrive policy moves it to the
// DLQ after maxReceiveCount receives.
func TestMappingDeletesSuccessesAndRedrivesFailedItems(t *testing.T) {
	t.Parallel()
	c := sqstest.Client(t)
	ctx := testenv.Context(t, 20*time.Second)
	tmpl := Template{VisibilityTimeout: time.Second, MaxReceiveCount: 2, BatchSize: 10, BatchingWindow: 300 * time.Millisecond}
	q := newQueues(t, ctx, c, "okmap", tmpl)
	f := startPartial(t, ctx, "partial")

	for _, body := range []string{"ok-1", "ok-2", "fail-1"} {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(body)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string][]string{} // body -> ApproximateReceiveCount of each delivery
	m := &Mapping{SQS: c, Queue: q, Region: "us-east-1", Functions: []*Function{f}, BatchSize: tmpl.BatchSize, Window: tmpl.BatchingWindow,
		Observe: func(inv Invocation) {
			if inv.Error != "" {
				t.Errorf("invocation failed: %s", inv.Error)
				return
			}
			var r struct {
				Received events.SQSEvent `json:"received"`
			}
			if err := json.Unmarshal(inv.Response, &r); err != nil {
				t.Errorf("response: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for _, rec := range r.Received.Records {
				wantLikeLambda(t, rec, q.ARN)
				seen[rec.Body] = append(seen[rec.Body], rec.Attributes["ApproximateReceiveCount"])
			}
		}}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { m.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()

	// Wait for the failed message to reach the DLQ through the redrive.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		n, err := Depth(ctx, c, q.DLQURL)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			msg := fmt.Sprintf("the failed item never reached the DLQ; receive counts by body: %v", seen)
			mu.Unlock()
			t.Fatal(msg)
		}
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, ok := range []string{"ok-1", "ok-2"} {
		if len(seen[ok]) != 1 {
			t.Errorf("%s delivered %d times, want once", ok, len(seen[ok]))
		}
	}
	// One delivery a receive until maxReceiveCount (2), then the redrive.
	if got, want := seen["fail-1"], []string{"1", "2"}; !slices.Equal(got, want) {
		t.Errorf("fail-1 receive counts %v, want %v", got, want)
	}
	if n, _ := Depth(ctx, c, q.URL); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
	if n := m.Stats.Deleted.Load(); n != 2 {
		t.Errorf("Stats.Deleted = %d, want the 2 successes", n)
	}
	if n := m.Stats.ItemFailures.Load(); n != 2 {
		t.Errorf("Stats.ItemFailures = %d, want fail-1 twice", n)
	}
}

// wantLikeLambda checks that a record carries what Lambda's event source
// mapping puts in one.
func wantLikeLambda(t *testing.T, rec events.SQSMessage, queueARN string) {
	t.Helper()
	if rec.EventSourceARN != queueARN {
		t.Errorf("record %s: eventSourceARN %q, want %q", rec.MessageId, rec.EventSourceARN, queueARN)
	}
	if rec.EventSource != "aws:sqs" {
		t.Errorf("record %s: eventSource %q, want aws:sqs", rec.MessageId, rec.EventSource)
	}
	if rec.AWSRegion != "us-east-1" {
		t.Errorf("record %s: awsRegion %q, want us-east-1", rec.MessageId, rec.AWSRegion)
	}
	if rec.ReceiptHandle == "" {
		t.Errorf("record %s: no receiptHandle", rec.MessageId)
	}
	if rec.MessageId == "" {
		t.Errorf("record with body %q: no messageId", rec.Body)
	}
}

// With two instances (the template's
// MaximumConcurrency) both receive batches, and every message is still
// handled exactly once and deleted.
func TestMappingFeedsEveryInstance(t *testing.T) {
	t.Parallel()
	c := sqstest.Client(t)
	ctx := testenv.Context(t, 20*time.Second)
	tmpl := Template{VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 5, BatchSize: 1}
	q := newQueues(t, ctx, c, "okmapn", tmpl)
	var instances []*Function
	for _, name := range []string{"partial-a", "partial-b"} {
		instances = append(instances, startPartial(t, ctx, name))
	}
	const n = 30
	for i := range n {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(fmt.Sprintf("ok-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	byInstance, byBody := map[string]int{}, map[string]int{}
	m := &Mapping{SQS: c, Queue: q, Region: "us-east-1", Functions: instances, BatchSize: tmpl.BatchSize,
		Observe: func(inv Invocation) {
			var r struct {
				Received events.SQSEvent `json:"received"`
			}
			if inv.Error != "" {
				t.Errorf("invocation of %s failed: %s", inv.Function, inv.Error)
				return
			}
			if err := json.Unmarshal(inv.Response, &r); err != nil {
				t.Errorf("invocation of %s: response %s: %v", inv.Function, inv.Response, err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			byInstance[inv.Function]++
			for _, rec := range r.Received.Records {
				byBody[rec.Body]++
			}
		}}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { m.Run(runCtx); close(done) }()
	for m.Stats.Deleted.Load() < n && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if got := m.Stats.Deleted.Load(); got != n {
		t.Errorf("Stats.Deleted = %d, want %d", got, n)
	}
	if len(byBody) != n {
		t.Errorf("%d distinct bodies handled, want %d", len(byBody), n)
	}
	for body, times := range byBody {
		if times != 1 {
			t.Errorf("%s handled %d times, want once", body, times)
		}
	}
	for _, name := range []string{"partial-a", "partial-b"} {
		if byInstance[name] == 0 {
			t.Errorf("%s was never invoked, want both instances fed: %v", name, byInstance)
		}
	}
}

// newQueues creates the template's queue and DLQ under a fresh name with
// prefix, deleted when the test ends.
func newQueues(t *testing.T, ctx context.Context, c *sqs.Client, prefix string, tmpl Template) Queues {
	t.Helper()
	q, err := CreateQueues(ctx, c, fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano()), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Delete(context.Background(), c) })
	return q
}

// startPartial runs the partial-batch test function under rie as name,
// stopped when the test ends, its output logged if the test failed.
func startPartial(t *testing.T, ctx context.Context, name string) *Function {
	t.Helper()
	rieBin := testenv.Require(t, "AWS_LAMBDA_RIE")
	bootstrap := lambdatest.Build(t, "./infra/local/testdata/partial")
	var logs syncbuf.Buffer // written by rie's pipe copier
	f, err := rie.Start(ctx, rie.Spec{Name: name, RIE: rieBin, Bootstrap: bootstrap, Output: &logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.Stop()
		if t.Failed() {
			t.Logf("%s: rie and function output:\n%s", name, logs.String())
		}
	})
	return f
}

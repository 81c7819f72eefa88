package local

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/outboxkeeper/outboxkeeper/internal/lambdatest"
	"github.com/outboxkeeper/outboxkeeper/internal/rie"
	"github.com/outboxkeeper/outboxkeeper/internal/sqstest"
	"github.com/outboxkeeper/outboxkeeper/internal/testenv"
)

// TestMapping runs the event source mapping against fauxqs and a real
// bootstrap under rie: successes are deleted after one delivery, a failed
// item comes back after the visibility timeout with a growing
// ApproximateReceiveCount, and the queue's redrive policy moves it to the
// DLQ after maxReceiveCount receives.
func TestMapping(t *testing.T) {
	t.Parallel()
	rieBin := testenv.Require(t, "AWS_LAMBDA_RIE")
	bootstrap := lambdatest.Build(t, "./infra/local/testdata/partial")
	c := sqstest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	tmpl := Template{VisibilityTimeout: time.Second, MaxReceiveCount: 2, BatchSize: 10, BatchingWindow: 300 * time.Millisecond}
	q, err := CreateQueues(ctx, c, fmt.Sprintf("okmap-%d", time.Now().UnixNano()), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Delete(context.Background(), c)

	var logs bytes.Buffer // written by rie's pipe copier; read after Stop
	f, err := rie.Start(ctx, rie.Spec{Name: "partial", RIE: rieBin, Bootstrap: bootstrap, Output: &logs})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		f.Stop()
		if t.Failed() {
			t.Logf("rie and function output:\n%s", logs.String())
		}
	}()

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
				if rec.EventSourceARN != q.ARN || rec.EventSource != "aws:sqs" || rec.AWSRegion != "us-east-1" || rec.ReceiptHandle == "" || rec.MessageId == "" {
					t.Errorf("record not as Lambda sends it: %+v", rec)
				}
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
	if got := seen["fail-1"]; len(got) != tmpl.MaxReceiveCount || got[0] != "1" || got[1] != "2" {
		t.Errorf("fail-1 receive counts %v, want [1 2]", got)
	}
	if n, _ := Depth(ctx, c, q.URL); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
	if m.Stats.Deleted.Load() != 2 || m.Stats.ItemFailures.Load() != 2 {
		t.Errorf("deleted %d, item failures %d", m.Stats.Deleted.Load(), m.Stats.ItemFailures.Load())
	}
}

// TestMappingFeedsEveryInstance: with two instances (the template's
// MaximumConcurrency) both receive batches, and every message is still
// handled exactly once and deleted.
func TestMappingFeedsEveryInstance(t *testing.T) {
	t.Parallel()
	rieBin := testenv.Require(t, "AWS_LAMBDA_RIE")
	bootstrap := lambdatest.Build(t, "./infra/local/testdata/partial")
	c := sqstest.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	tmpl := Template{VisibilityTimeout: 30 * time.Second, MaxReceiveCount: 5, BatchSize: 1}
	q, err := CreateQueues(ctx, c, fmt.Sprintf("okmapn-%d", time.Now().UnixNano()), tmpl)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Delete(context.Background(), c)

	var instances []*Function
	for _, name := range []string{"partial-a", "partial-b"} {
		f, err := rie.Start(ctx, rie.Spec{Name: name, RIE: rieBin, Bootstrap: bootstrap, Output: &bytes.Buffer{}})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Stop()
		instances = append(instances, f)
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
			if inv.Error != "" || json.Unmarshal(inv.Response, &r) != nil {
				t.Errorf("invocation of %s: %s %s", inv.Function, inv.Error, inv.Response)
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
	if m.Stats.Deleted.Load() != n || len(byBody) != n {
		t.Fatalf("deleted %d, handled %d distinct bodies, want %d", m.Stats.Deleted.Load(), len(byBody), n)
	}
	for body, times := range byBody {
		if times != 1 {
			t.Errorf("%s handled %d times", body, times)
		}
	}
	if byInstance["partial-a"] == 0 || byInstance["partial-b"] == 0 {
		t.Errorf("invocations by instance %v: want both instances fed", byInstance)
	}
}

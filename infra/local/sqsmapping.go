package local

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"

	"github.com/outboxkeeper/outboxkeeper/internal/testkit/esm"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// Mapping plays Lambda's SQS event source mapping with
// ReportBatchItemFailures for one function: it long-polls the queue,
// gathers a batch, invokes the function with a real events.SQSEvent,
// deletes the messages that succeeded, and leaves the failed ones to the
// visibility timeout, so the queue's redrive policy counts their receives.
type Mapping struct {
	SQS    *sqs.Client
	Queue  Queues
	Region string
	// Functions are instances of one function, each under its own rie
	// (which serves one invocation at a time): one poller per instance,
	// so at most len(Functions) batches are in flight, as
	// ScalingConfig.MaximumConcurrency allows on AWS.
	Functions []*Function
	BatchSize int
	// Window is MaximumBatchingWindowInSeconds: after the first message,
	// how long to keep gathering before invoking with a partial batch.
	Window  time.Duration
	Observe Observer

	Stats MappingStats
}

// MappingStats count what the mapping did to the queue.
type MappingStats struct {
	Deleted, ItemFailures atomic.Int64
}

// longPoll is the wait of the first receive of a batch. SQS allows 20s;
// shorter keeps shutdown prompt, at the price of a few empty receives.
const longPoll = 2

// Run polls until ctx ends, with one poller per function instance.
func (m *Mapping) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, f := range m.Functions {
		wg.Go(func() { m.poll(ctx, f) })
	}
	wg.Wait()
}

// poll feeds one instance: gather a batch, invoke, settle, repeat.
func (m *Mapping) poll(ctx context.Context, f *Function) {
	for ctx.Err() == nil {
		batch, err := m.gather(ctx)
		if err != nil {
			if ctx.Err() == nil {
				m.observeError(f, fmt.Errorf("receive: %w", err))
				_ = pass.Sleep(ctx, time.Second)
			}
			continue
		}
		if len(batch) > 0 {
			m.deliver(ctx, f, batch)
		}
	}
}

// gather returns up to BatchSize messages: one long poll for the first,
// then short polls until the batch is full or the window has passed. Short
// polls, not a long poll cut off by a deadline: a receive abandoned
// mid-flight may still have hidden its messages for the whole visibility
// timeout.
func (m *Mapping) gather(ctx context.Context) ([]types.Message, error) {
	batch, err := m.receive(ctx, m.BatchSize, longPoll)
	if err != nil || len(batch) == 0 {
		return batch, err
	}
	deadline := time.Now().Add(m.Window)
	for len(batch) < m.BatchSize && time.Now().Before(deadline) {
		more, err := m.receive(ctx, m.BatchSize-len(batch), 0)
		if err != nil {
			return batch, nil // deliver what we hold; the next poll retries
		}
		batch = append(batch, more...)
		if len(more) == 0 {
			_ = pass.Sleep(ctx, min(100*time.Millisecond, time.Until(deadline)))
		}
	}
	return batch, nil
}

func (m *Mapping) receive(ctx context.Context, max int, wait int32) ([]types.Message, error) {
	out, err := m.SQS.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(m.Queue.URL),
		MaxNumberOfMessages:         int32(max),
		WaitTimeSeconds:             wait,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		MessageAttributeNames:       []string{"All"},
	})
	if err != nil {
		return nil, err
	}
	return out.Messages, nil
}

// deliver invokes instance f with one batch and settles the messages.
func (m *Mapping) deliver(ctx context.Context, f *Function, batch []types.Message) {
	event, err := json.Marshal(esm.Event(m.Queue.ARN, m.Region, batch))
	if err != nil {
		m.observeError(f, err)
		return
	}
	resp, err := invoke(ctx, f, event, m.Observe)
	if err != nil {
		// A failed invocation fails the whole batch: every message comes
		// back after the visibility timeout, as with Lambda. (invoke has
		// told the observer.)
		return
	}
	failed, whole := failedItems(resp, batch)
	if whole {
		m.Stats.ItemFailures.Add(int64(len(batch)))
		return
	}
	m.Stats.ItemFailures.Add(int64(len(failed)))
	var entries []types.DeleteMessageBatchRequestEntry
	for i, msg := range batch {
		if !failed[aws.ToString(msg.MessageId)] {
			entries = append(entries, types.DeleteMessageBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: msg.ReceiptHandle,
			})
		}
	}
	if len(entries) == 0 {
		return
	}
	// Deleting must not be cut short by shutdown: a batch the function
	// handled should not be handled again by the next run.
	out, err := m.SQS.DeleteMessageBatch(context.WithoutCancel(ctx), &sqs.DeleteMessageBatchInput{
		QueueUrl: aws.String(m.Queue.URL), Entries: entries,
	})
	if err != nil {
		m.observeError(f, fmt.Errorf("delete %d messages: %w", len(entries), err))
		return
	}
	m.Stats.Deleted.Add(int64(len(out.Successful)))
}

// failedItems reads a partial batch response. As Lambda does, a response
// naming an item that is not in the batch (or naming none by an empty id)
// fails the whole batch, and so does a response that is not one at all.
func failedItems(resp json.RawMessage, batch []types.Message) (failed map[string]bool, whole bool) {
	var r events.SQSEventResponse
	if len(resp) > 0 && string(resp) != "null" {
		if err := json.Unmarshal(resp, &r); err != nil {
			return nil, true
		}
	}
	inBatch := make(map[string]bool, len(batch))
	for _, msg := range batch {
		inBatch[aws.ToString(msg.MessageId)] = true
	}
	failed = map[string]bool{}
	for _, f := range r.BatchItemFailures {
		if !inBatch[f.ItemIdentifier] {
			return nil, true
		}
		failed[f.ItemIdentifier] = true
	}
	return failed, false
}

func (m *Mapping) observeError(f *Function, err error) {
	if m.Observe != nil {
		m.Observe(Invocation{Function: f.Name + "-mapping", Start: time.Now(), Error: err.Error()})
	}
}

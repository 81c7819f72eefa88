package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sns"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/shared/pass"
)

// fanout is where the demo's relay sends: an SNS FIFO topic with an SQS
// FIFO queue subscribed (raw message delivery, so each message is the
// relay's envelope), on fauxqs. FIFO on both, so the queue keeps each
// group's order and the verdict can judge it.
type fanout struct {
	sns      *sns.Client
	sqs      *sqs.Client
	topicARN string
	queueURL string
}

func newFanout(ctx context.Context, name string) (*fanout, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("AWS config: %w", err)
	}
	f := &fanout{sns: sns.NewFromConfig(cfg), sqs: sqs.NewFromConfig(cfg)}
	topic, err := f.sns.CreateTopic(ctx, &sns.CreateTopicInput{Name: aws.String(name + ".fifo"),
		Attributes: map[string]string{"FifoTopic": "true", "ContentBasedDeduplication": "false"}})
	if err != nil {
		return nil, fmt.Errorf("create the relay's topic: %w", err)
	}
	f.topicARN = aws.ToString(topic.TopicArn)
	q, err := f.sqs.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-relayed.fifo"),
		Attributes: map[string]string{"FifoQueue": "true"}})
	if err != nil {
		return nil, fmt.Errorf("create the relay's queue: %w", err)
	}
	f.queueURL = aws.ToString(q.QueueUrl)
	attrs, err := f.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		return nil, fmt.Errorf("the relay's queue ARN: %w", err)
	}
	if _, err := f.sns.Subscribe(ctx, &sns.SubscribeInput{TopicArn: topic.TopicArn, Protocol: aws.String("sqs"),
		Endpoint:   aws.String(attrs.Attributes[string(types.QueueAttributeNameQueueArn)]),
		Attributes: map[string]string{"RawMessageDelivery": "true"}}); err != nil {
		return nil, fmt.Errorf("subscribe the relay's queue: %w", err)
	}
	return f, nil
}

func (f *fanout) delete(ctx context.Context) {
	_, _ = f.sns.DeleteTopic(ctx, &sns.DeleteTopicInput{TopicArn: aws.String(f.topicARN)})
	_, _ = f.sqs.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(f.queueURL)})
}

// queueConsumer reads what the relay delivered, from the queue, as a
// consumer of the team's bus would: it deduplicates by the envelope's
// sequence, checks each group's sequences rise, and keeps when each
// message entered the queue (its SentTimestamp).
type queueConsumer struct {
	f *fanout
	l *ledger

	mu       sync.Mutex
	seen     map[int64]time.Time // first arrival in the queue, by sequence
	repeats  int
	last     map[string]int64 // the last new sequence of each group
	outOfOrd int
}

func newQueueConsumer(f *fanout, l *ledger) *queueConsumer {
	return &queueConsumer{f: f, l: l, seen: map[int64]time.Time{}, last: map[string]int64{}}
}

func (c *queueConsumer) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := c.once(ctx); err != nil && ctx.Err() == nil {
			c.l.fail("queue consumer", err)
			_ = pass.Sleep(ctx, time.Second)
		}
	}
}

func (c *queueConsumer) once(ctx context.Context) error {
	out, err := c.f.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(c.f.queueURL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
		// Short, so a receive whose answer is lost holds a group back for
		// seconds, not SQS's default 30.
		VisibilityTimeout:           5,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		return err
	}
	var done []types.DeleteMessageBatchRequestEntry
	for i, m := range out.Messages {
		var env struct {
			Sequence int64  `json:"sequence"`
			Topic    string `json:"topic"`
		}
		if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &env); err != nil {
			c.l.fail("queue consumer", fmt.Errorf("message %s is not an envelope: %w", aws.ToString(m.MessageId), err))
		} else {
			ms, _ := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
			c.take(env.Sequence, m.Attributes[string(types.MessageSystemAttributeNameMessageGroupId)], time.UnixMilli(ms))
		}
		done = append(done, types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle})
	}
	if len(done) > 0 {
		if _, err := c.f.sqs.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(c.f.queueURL), Entries: done}); err != nil {
			return err
		}
	}
	return nil
}

// take records one message: a sequence seen before is a repeat (at least
// once), dropped as a consumer that deduplicates by sequence drops it.
func (c *queueConsumer) take(seq int64, group string, sentAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.seen[seq]; ok {
		c.repeats++
		return
	}
	c.seen[seq] = sentAt
	if seq <= c.last[group] {
		c.outOfOrd++
	}
	c.last[group] = seq
}

// queueView is what the verdict reads.
type queueView struct {
	Arrived    map[int64]time.Time
	Repeats    int
	Groups     int
	OutOfOrder int
}

func (c *queueConsumer) view() queueView {
	c.mu.Lock()
	defer c.mu.Unlock()
	arrived := make(map[int64]time.Time, len(c.seen))
	for s, at := range c.seen {
		arrived[s] = at
	}
	return queueView{Arrived: arrived, Repeats: c.repeats, Groups: len(c.last), OutOfOrder: c.outOfOrd}
}

// count is how many distinct sequences arrived.
func (c *queueConsumer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

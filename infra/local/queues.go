package local

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/outboxkeeper/outboxkeeper/internal/queuedepth"
)

// Queues are the rollback report queue and its dead-letter queue.
type Queues struct {
	URL, ARN       string
	DLQURL, DLQARN string
}

// CreateQueues creates (or finds: CreateQueue with the same attributes is
// idempotent) the report queue `name` and its DLQ `name-dlq`, configured
// as template.yaml's RollbackReportQueue and RollbackReportDLQ, so the
// emulator's redrive moves a message after maxReceiveCount receives.
func CreateQueues(ctx context.Context, c *sqs.Client, name string, t Template) (Queues, error) {
	var q Queues
	var err error
	if q.DLQURL, q.DLQARN, err = createQueue(ctx, c, name+"-dlq", map[string]string{
		"MessageRetentionPeriod": "1209600",
	}); err != nil {
		return q, err
	}
	redrive, _ := json.Marshal(map[string]string{
		"deadLetterTargetArn": q.DLQARN,
		"maxReceiveCount":     strconv.Itoa(t.MaxReceiveCount),
	})
	q.URL, q.ARN, err = createQueue(ctx, c, name, map[string]string{
		"VisibilityTimeout":      strconv.Itoa(int(t.VisibilityTimeout.Seconds())),
		"MessageRetentionPeriod": "86400",
		"RedrivePolicy":          string(redrive),
	})
	return q, err
}

func createQueue(ctx context.Context, c *sqs.Client, name string, attrs map[string]string) (url, arn string, err error) {
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		return "", "", fmt.Errorf("create queue %s: %w", name, err)
	}
	url = aws.ToString(out.QueueUrl)
	got, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", "", fmt.Errorf("queue %s: read ARN: %w", name, err)
	}
	return url, got.Attributes[string(types.QueueAttributeNameQueueArn)], nil
}

// Delete removes both queues (the demo's are per run).
func (q Queues) Delete(ctx context.Context, c *sqs.Client) {
	for _, url := range []string{q.URL, q.DLQURL} {
		if url != "" {
			_, _ = c.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: aws.String(url)})
		}
	}
}

// Depth is the number of messages in a queue, visible or in flight.
func Depth(ctx context.Context, c *sqs.Client, url string) (int, error) {
	d, err := queuedepth.Of(ctx, c, url)
	return d.Total(), err
}

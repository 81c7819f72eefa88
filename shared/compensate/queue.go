package compensate

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// SQS is the part of the SQS client the handler uses: the DLQ send, the
// visibility change of a deferred message, and the URL of the queue a
// message came from. *sqs.Client satisfies it; tests pass the real client
// pointed at the fauxqs emulator.
type SQS interface {
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	GetQueueUrl(ctx context.Context, in *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// queueURLs maps the event's eventSourceARN to the queue URL that
// ChangeMessageVisibility needs. The URL is asked of SQS (GetQueueUrl)
// rather than built from the ARN, because its shape depends on the
// endpoint (regional, VPC endpoint, an emulator); it is cached for the life
// of the execution environment, so a warm function asks once per queue.
type queueURLs struct {
	client SQS
	mu     sync.Mutex
	urls   map[string]string
}

func (q *queueURLs) lookup(ctx context.Context, arn string) (string, error) {
	q.mu.Lock()
	url, ok := q.urls[arn]
	q.mu.Unlock()
	if ok {
		return url, nil
	}
	// arn:aws:sqs:<region>:<account>:<name>
	parts := strings.Split(arn, ":")
	if len(parts) != 6 || parts[0] != "arn" || parts[2] != "sqs" || parts[5] == "" {
		return "", fmt.Errorf("event source %q is not an SQS queue ARN", arn)
	}
	in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[5])}
	if parts[4] != "" {
		in.QueueOwnerAWSAccountId = aws.String(parts[4])
	}
	out, err := q.client.GetQueueUrl(ctx, in, func(o *sqs.Options) {
		// The queue may live in another region than the function's default.
		if parts[3] != "" {
			o.Region = parts[3]
		}
	})
	if err != nil {
		return "", fmt.Errorf("queue URL of %s: %w", arn, err)
	}
	url = aws.ToString(out.QueueUrl)
	q.mu.Lock()
	if q.urls == nil {
		q.urls = map[string]string{}
	}
	q.urls[arn] = url
	q.mu.Unlock()
	return url, nil
}

// toDLQ forwards the original body unchanged, with the reason (`error`)
// and the report's message id on the source queue (`source_message_id`),
// which is the id compensate's log line names it by.
func (s *Service) toDLQ(ctx context.Context, it *item) error {
	_, err := s.sqs.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:    aws.String(s.cfg.DLQURL),
		MessageBody: aws.String(it.msg.Body),
		MessageAttributes: map[string]sqstypes.MessageAttributeValue{
			"error":             {DataType: aws.String("String"), StringValue: aws.String(it.reason)},
			"source_message_id": {DataType: aws.String("String"), StringValue: aws.String(it.msg.MessageId)},
		},
	})
	return err
}

func (s *Service) deferMessage(ctx context.Context, msg *events.SQSMessage) error {
	url, err := s.queues.lookup(ctx, msg.EventSourceARN)
	if err != nil {
		return err
	}
	_, err = s.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(url),
		ReceiptHandle:     aws.String(msg.ReceiptHandle),
		VisibilityTimeout: s.cfg.deferSeconds(),
	})
	return err
}

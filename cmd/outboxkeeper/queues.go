package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// The rollback report queues, named as `make up` prints them and as the
// stack's outputs RollbackReportQueueUrl and RollbackReportDLQUrl give
// them.
const (
	queueURLVar = "ROLLBACK_QUEUE_URL"
	dlqURLVar   = "ROLLBACK_DLQ_URL"
)

// queueFlags name the report queue and its DLQ; unset, the variables.
type queueFlags struct {
	queueURL, dlqURL string
}

func addQueueFlags(fs *flag.FlagSet, f *queueFlags) {
	fs.StringVar(&f.queueURL, "queue-url", "", "the rollback report queue (default: "+queueURLVar+")")
	fs.StringVar(&f.dlqURL, "dlq-url", "", "its dead-letter queue (default: "+dlqURLVar+")")
}

// urls are the flags, else the variables.
func (f *queueFlags) urls(e *env) (queue, dlq string) {
	queue, dlq = strings.TrimSpace(f.queueURL), strings.TrimSpace(f.dlqURL)
	if queue == "" {
		queue = strings.TrimSpace(lookup(e, queueURLVar))
	}
	if dlq == "" {
		dlq = strings.TrimSpace(lookup(e, dlqURLVar))
	}
	return queue, dlq
}

// queueHelp closes the help of every command that reads a queue.
const queueHelp = `The queues: --queue-url and --dlq-url, or ROLLBACK_QUEUE_URL and ROLLBACK_DLQ_URL
(the stack's outputs RollbackReportQueueUrl and RollbackReportDLQUrl; 'make up'
prints both). AWS credentials and region come from the usual places; the stack's
OperatorPolicyArn output allows exactly the calls these commands make.`

// sqsAPI is the part of the SQS client the CLI uses. (infra/deploy checks
// the template's operator policy against the calls made here.)
type sqsAPI interface {
	ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessage(ctx context.Context, in *sqs.SendMessageInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageOutput, error)
	DeleteMessage(ctx context.Context, in *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, in *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// newSQS is the SQS client from the default AWS configuration chain
// (AWS_ENDPOINT_URL_SQS points it at the local stack's emulator).
func newSQS(ctx context.Context) (sqsAPI, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	return sqs.NewFromConfig(cfg), nil
}
